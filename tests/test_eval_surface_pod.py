"""Pod launch pieces on one process: bucket agreement, the pod config, the sharded AOT compile."""
import os
import subprocess
import sys

import numpy as np
import pytest

from configs import pod_qwen2p5_1p5b
from experiments import launch_pod
from conftest import CPU_COLLECTIVE_FLAGS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bucket_errors():
    with pytest.raises(ValueError, match="does not fit the largest bucket 512"):
        launch_pod.agree_on_bucket(513, (256, 512))


def test_bucket_agreement_is_the_max_over_hosts(monkeypatch):
    assert launch_pod.agree_on_bucket(300, (256, 512, 1024)) == 512      # one real process
    # Four hosts whose own rows need 100, 700, 300 and 256 tokens: all must use 1024.
    others = np.asarray([[256], [1024], [512], [256]], np.int32)
    gathered = []

    def fake_allgather(x):
        gathered.append(np.asarray(x))
        return others
    monkeypatch.setattr(launch_pod.multihost_utils, "process_allgather", fake_allgather)
    assert launch_pod.agree_on_bucket(100, (256, 512, 1024)) == 1024
    np.testing.assert_array_equal(gathered[0], [256])                     # what this host sent


def test_pod_config_loads_both_ways():
    c = pod_qwen2p5_1p5b.get_config()
    assert c.model.preset == "qwen2.5-1.5b" and c.distributed.coordinator_address == "auto"
    assert dict(c.mesh.axes)["fsdp"] == 4 and c.rl.estimator == "gae"
    s = pod_qwen2p5_1p5b.get_config("smoke=True,fsdp=2,tensor=2")
    assert s.distributed.coordinator_address == "" and dict(s.mesh.axes)["tensor"] == 2


@pytest.mark.slow
def test_check_mode_compiles_sharded_step_on_an_8_device_cpu_mesh():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8 " + CPU_COLLECTIVE_FLAGS,
               JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-m", "experiments.launch_pod",
         "--config=configs/pod_qwen2p5_1p5b.py:smoke=True,fsdp=2,tensor=2", "--mode=check"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [l for l in out.stdout.splitlines() if l.startswith("{'topology'")][0]
    rec = eval(line)  # noqa: S307 (our own printed dict)
    assert rec["topology"]["mesh"] == {"data": 2, "fsdp": 2, "tensor": 2}
    assert rec["check"]["length"] == 128 and rec["check"]["batch_rows"] == 8
    # Parameters are split over fsdp x tensor: per-device arguments well below a full replica.
    full_bytes = rec["check"]["params"] * 4 * 3          # params + Adam mu, nu in fp32
    assert rec["check"]["argument_size_in_bytes"] < 0.5 * full_bytes
