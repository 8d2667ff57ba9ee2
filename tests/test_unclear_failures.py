"""Issue 13 defect 6 (part): a zero-size tensor, a -c text whose eager value is huge, and a
torch.export(...).module() program each end in one clear DeplokitError / CLI line."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import deplokit
from deplokit.errors import CaptureError, DeplokitError

ROOT = Path(__file__).resolve().parents[1]


def test_zero_size_input_is_refused_naming_it():
    with pytest.raises(CaptureError, match=r"input x has shape \(0, 4\), with no elements"):
        deplokit.compile(lambda x: x * 2, torch.randn(0, 4))


def test_zero_size_intermediate_is_refused():
    with pytest.raises(CaptureError, match=r"\(3, 0\), with no elements"):
        deplokit.compile(lambda x: x[:, 2:2] * 2, torch.randn(3, 4))


def test_exported_module_compiles_and_matches_eager():
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    m = torch.export.export(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()), (x,)).module()
    c = deplokit.compile(m, x)
    assert c.check(x, backend="loop").ok


_HUGE = "x=torch.randn(1,1); x.expand(2**16,2**15)*2"


def test_huge_eager_expression_is_refused_quickly_with_modest_memory():
    """The -c text used to allocate 8.6 GB evaluating its value; it must not materialise it."""
    probe = textwrap.dedent(f"""
        import resource, sys
        from deplokit.errors import ExpressionError
        from deplokit.frontend.expression import load_expression
        try:
            load_expression({_HUGE!r})
            print("LOADED")
        except ExpressionError as e:
            print("REFUSED", e)
        # the peak of this process's own memory: /proc's VmHWM starts afresh at exec, where
        # ru_maxrss can carry the forking parent's peak (pytest's, over a long run)
        try:
            with open("/proc/self/status") as f:
                peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        except (OSError, StopIteration):
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print("MAXRSS_KB", peak)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.strip().splitlines())
    assert int(lines["MAXRSS_KB"]) < 1_500_000, out.stdout      # far below the 8.6 GB it took
    if "REFUSED" in lines:
        assert "(65536, 32768)" in lines["REFUSED"]


def test_huge_eager_expression_cli_prints_one_line():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "deplokit", "compile", "-c", _HUGE],
                         capture_output=True, text=True, timeout=300, env=env)
    assert "Traceback" not in out.stderr
    if out.returncode != 0:
        assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("deplokit: error:")


def test_small_expressions_still_evaluate():
    from deplokit.frontend.expression import load_expression
    p = load_expression("x = torch.randn(64, 64); w = torch.randn(64, 64); torch.relu(x @ w).expand(4, 64, 64) * 2")
    assert tuple(p.inputs[0].shape) == (64, 64)
    assert issubclass(CaptureError, DeplokitError)


def test_empty_piece_of_cat_is_dropped_but_an_empty_output_is_refused():
    x = torch.randn(3, 4)
    c = deplokit.compile(lambda v: torch.cat([v[:, 1:1], v * 2], 1), x)
    assert c.check(x, backend="loop").ok
    with pytest.raises(CaptureError, match=r"no elements"):
        deplokit.compile(lambda v: v[1:1], x)
