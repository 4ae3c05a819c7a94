#!/usr/bin/env bash
# Prepares, on the development machine, what the accelerator check carries to a GPU machine that
# has no network: the Python packages its image lacks, the TextWorld games of the RL run, and the
# SmolLM2 GGUF in two parts (98 MB; one call carries at most 64 MiB, so each of the two calls,
# benchmarks/gpu_check.sh and benchmarks/gpu_rl_run.sh, carries one part, and the second call
# finds the first part where the first call left it on the same, still warm, machine).
#
#   bash benchmarks/gpu_prepare.sh          # after `make setup`; writes the ignored folders
#     .gpu_carry/   site.tar.xz (packages for Python 3.12), games.tar.xz (cached in
#                   data/gpu_games; 62 MB of .z8 files, 2.5 MB compressed), smollm2.sha256
#     .gpu_part_a/  the GGUF's first 52,000,000 bytes     .gpu_part_b/  the rest
#
# Then, with the device tool (device time is counted from the first call):
#   run(command="bash benchmarks/gpu_check.sh", carry=[".gpu_carry", ".gpu_part_a"], timeout_s=600)
#   run(command="bash benchmarks/gpu_rl_run.sh", carry=[".gpu_carry", ".gpu_part_b"], timeout_s=420)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PY312=${PY312:-python3.12}   # any pip that can download for Python 3.12 wheels
rm -rf .gpu_carry .gpu_part_a .gpu_part_b /tmp/gpu_site /tmp/gpu_whl
mkdir -p .gpu_carry .gpu_part_a .gpu_part_b /tmp/gpu_whl
# Pure-Python (or abi3) wheels the device image lacks, at the versions setup.py resolves here.
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d /tmp/gpu_whl ml_collections==1.1.0 gguf==0.19.0 textworld==1.7.0 hashids==1.3.1 \
  mementos==1.3.1 more_itertools==11.2.1 prompt_toolkit==3.0.53 TatSu==5.8.3 termcolor==3.3.0 \
  wcwidth==0.9.4
$PY -m pip install -q --no-deps --no-compile --target /tmp/gpu_site/site /tmp/gpu_whl/*.whl
# jericho (TextWorld's Z-machine) is built from source at install: carry the built package (its
# libfrotz.so is a plain C library loaded through ctypes, independent of the Python version).
SITE=$($PY -c "import jericho, os; print(os.path.dirname(os.path.dirname(jericho.__file__)))")
cp -r "$SITE"/jericho "$SITE"/jericho-*.dist-info /tmp/gpu_site/site/
find /tmp/gpu_site -name __pycache__ -prune -exec rm -rf {} +
tar -C /tmp/gpu_site -cJf .gpu_carry/site.tar.xz site
# The RL run's games: generated here with tw-make (or found in the cache), with their manifests;
# the Inform 7 sources (.ni) stay behind.
$PY - <<'EOF'
from configs import smollm2_textworld
from meowjax.trainers import data
if __name__ == "__main__":
    c = smollm2_textworld.get_config("gpu=True")
    c.unlock(); c.games.cache_dir = "data/gpu_games"; c.lock()
    print({k: len(v) for k, v in data.game_sets(c).items()})
EOF
tar -C data --exclude='*.ni' -cJf .gpu_carry/games.tar.xz gpu_games
GGUF=$($PY -c "from meowjax.models import gguf_io; print(gguf_io.find_smollm2_gguf())")
sha256sum "$GGUF" | cut -d' ' -f1 > .gpu_carry/smollm2.sha256
head -c 52000000 "$GGUF" > .gpu_part_a/smollm2.gguf.part
tail -c +52000001 "$GGUF" > .gpu_part_b/smollm2.gguf.part
# The device's copy of the tree has no history of its own: the record names this commit.
git describe --always --dirty > .gpu_carry/commit
du -sh .gpu_carry .gpu_part_a .gpu_part_b
