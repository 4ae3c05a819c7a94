# Sourced by the accelerator check's scripts (benchmarks/gpu_check.sh, gpu_rl_run.sh), from the
# repository root: the carried packages (benchmarks/gpu_prepare.sh) and the repository on the
# Python path, unbuffered output; PY is the interpreter (the device image's python3 by default).
PY=${PY:-python3}
if [[ -f .gpu_carry/site.tar.xz ]]; then
  mkdir -p /tmp/gpu_site && tar -C /tmp/gpu_site -xJf .gpu_carry/site.tar.xz
  export PYTHONPATH=/tmp/gpu_site/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
