"""Prologues that do not multiply work (issue 14 part 4): a producer fused into a
contraction's operand is evaluated once per (m, k) for every output column, inside the K
loop. The fuse guard counts that (evaluations from the loop nest) against the contraction's
own work, keeps a cheap prologue and stores a costly one, and the trace says which with
both counts."""
import re

import pytest
import torch
import torch.nn.functional as F

import deplokit
from deplokit.passes.fuse.guard import CONTRACTION_BUDGET
from deplokit.runtime.nvcc import nvcc_available

M, K, N = 24, 40, 36


def _silu_mul_matmul(g, u, w):
    return (F.silu(g) * u) @ w


def _scale_matmul(x, w):
    return (x * 0.125) @ w


def _inputs(name):
    torch.manual_seed(0)
    if name == "silu_mul":
        return _silu_mul_matmul, (torch.randn(M, K), torch.randn(M, K), torch.randn(K, N))
    return _scale_matmul, (torch.randn(M, K), torch.randn(K, N))


def _fuse_notes(c):
    return next(s for s in c.trace if s.name == "fuse").notes


def test_silu_mul_is_staged_not_recomputed_in_the_k_loop():
    fn, inputs = _inputs("silu_mul")
    c = deplokit.compile(fn, *inputs)
    notes = _fuse_notes(c)
    # In the K loop mul would be read N times per element (too much); staged with gate's and
    # up's slab it is computed once per element per N-block: N = 36 is one block, no extra.
    line = next(n for n in notes if n.startswith("kernel merged_matmul"))
    got = re.search(r"staged prologue sigmoid, silu, mul: .* \((\d+)x\): extra work (\d+) <= (\S+) x contraction "
                    r"work (\d+) \(in the K loop: (\d+)\)", line)
    assert got, line
    assert (int(got[1]), int(got[2])) == (1, 0)
    # sigmoid, silu and mul: three statements per (m, n, k), each needed only once per (m, k).
    assert int(got[5]) == 3 * (M * N * K - M * K) > CONTRACTION_BUDGET * int(got[4])
    assert len(c.loop_ir.kernels) == 1 and not any(n.startswith("store mul") for n in notes)


def test_a_scale_prologue_stays_by_the_count():
    fn, inputs = _inputs("scale")
    c = deplokit.compile(fn, *inputs)
    notes = _fuse_notes(c)
    # One multiply per (m, n, k) against the contraction's loads, multiply and accumulate.
    extra = M * N * K - M * K
    essential = 4 * M * N * K + M * K   # x, w loads, multiply, accumulate; the scale once per element
    fused = extra <= CONTRACTION_BUDGET * essential
    assert fused
    assert len(c.loop_ir.kernels) == 1
    line = next(n for n in notes if n.startswith("kernel "))
    assert f"extra work {extra} <= {CONTRACTION_BUDGET:.3g} x contraction work {essential}" in line, line


@pytest.mark.parametrize("backend", ["loop", "sim"])
@pytest.mark.parametrize("name", ["silu_mul", "scale"])
def test_either_choice_matches_eager(name, backend):
    fn, inputs = _inputs(name)
    assert deplokit.compile(fn, *inputs).check(backend=backend, rtol=1e-4, atol=1e-5).ok


@pytest.mark.skipif(not nvcc_available(), reason="nvcc is not on PATH")
@pytest.mark.parametrize("name", ["silu_mul", "scale"])
def test_either_choice_compiles_with_nvcc(name):
    fn, inputs = _inputs(name)
    c = deplokit.compile(fn, *inputs, target="sm_90")
    assert set(c.nvcc().stats) == set(c.cuda.kernels)
