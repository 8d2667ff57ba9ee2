"""`make demo` is one of the two commands a fresh machine needs: it must finish, agree
with torch eager on every backend it can run here, and say why it skips the others."""
import subprocess
import sys

from deplokit.runtime.device import gpu_available


def test_demo_runs_every_stage_and_agrees_with_eager():
    res = subprocess.run([sys.executable, "-m", "deplokit.demo"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    out = res.stdout
    for stage in ("torch", "tensor", "loop", "tile", "kernel", "cuda"):
        assert f"({stage}) ====" in out
    assert "t:016_mark_unroll: ok" in out
    assert "all backends agree with torch eager" in out
    if not gpu_available():
        assert "cupy: not run: no CUDA device here" in out
