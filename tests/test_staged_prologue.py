"""Prologues on the staged slab (issue 26 part 3): down(silu(gate) * up) is one kernel. The
fuse guard lets silu·mul into the contraction counting its recompute once per element per
N-block (it is applied while the A slab is staged); 007 records the prologue on the Stage,
011 / 013 leave that stage a synchronous copy through registers, k002 applies it between the
global load and the shared store; the simulator runs it against eager. A prologue whose
recompute per N-block still costs more than the budget stays a kernel of its own."""
import re

import pytest
import torch
import torch.nn.functional as F

import deplokit
from deplokit.bench.suite import suite_entries
from deplokit.ir.tile_ir import Stage, walk
from deplokit.passes.fuse.guard import CONTRACTION_BUDGET, STAGED_TILE, judge, staged_extra
from deplokit.runtime.nvcc import compile_cuda, nvcc_available


def _swiglu_down(g, u, w):
    return torch.matmul(F.silu(g) * u, w)


def _compile(M, K, N, target="sm_90", seed=0):
    gen = torch.Generator().manual_seed(seed)
    inputs = (torch.randn(1, M, K, generator=gen), torch.randn(1, M, K, generator=gen),
              torch.randn(K, N, generator=gen))
    return deplokit.compile(_swiglu_down, *inputs, target=target)


def _notes(c, name):
    """A pass's trace lines: its notes and each kernel's decision (note or reason to skip)."""
    return " | ".join([n for s in c.trace if s.name == name for n in s.notes] +
                      [d.note or d.skipped for s in c.trace if s.name == name for d in s.decisions])


def _prologue_stages(c):
    return [s for k in c.tile_ir.kernels for s, _ in walk(k.tile().body) if isinstance(s, Stage) and s.prologue]


def test_staged_extra_counts_one_evaluation_per_element_and_n_block():
    # A 32 x 64 prologue read by 200 columns: 4 blocks of 64 columns stage each element.
    evals = {"sigmoid": 32 * 64 * 200, "mul": 32 * 64 * 200}
    numel = {"sigmoid": 32 * 64, "mul": 32 * 64}
    extra = {n: e - numel[n] for n, e in evals.items()}
    assert STAGED_TILE == 64
    assert staged_extra(extra, evals, numel, {"sigmoid": 200, "mul": 200}) == 2 * 32 * 64 * 3
    assert staged_extra(extra, evals, numel, {"sigmoid": 200}) is None     # mul is not one operand's
    order = {"sigmoid": 0, "mul": 1}
    work = 4 * 32 * 64 * 200 + sum(extra.values())
    ok = judge("k", evals, numel, {}, {}, work, order, True, {"sigmoid": 200, "mul": 200})
    assert ok.node is None and ok.reason.startswith("staged prologue sigmoid, mul"), ok.reason
    refused = judge("k", evals, numel, {}, {}, work, order, True, {"sigmoid": 200})
    assert refused.node == "mul"


@pytest.mark.parametrize("M, K, N", [(48, 64, 160), (37, 75, 53)])
def test_swiglu_down_is_one_kernel_against_eager_on_the_simulator(M, K, N):
    c = _compile(M, K, N)
    main = [k for k in c.kernel_ir.kernels if not k.name.endswith("_reduce")]
    assert len(main) == 1 and len(c.loop_ir.kernels) == 1      # no silu·mul kernel, no intermediate
    stages = _prologue_stages(c)            # the K loop's and (K = 75) its tail loop's
    assert len(stages) == (1 if K % 16 == 0 else 2)
    for stage in stages:
        assert stage.prologue.inputs == ("g", "u") and stage.copy == "sync"
        assert [s.op for s in stage.prologue.body] == ["sigmoid", "multiply", "multiply"]
        assert f"{stage.name}: its prologue (sigmoid, multiply, multiply) is applied in registers" in \
            _notes(c, "013_async_copy")
        assert f"{stage.name}: sigmoid, multiply, multiply of g, u applied while staging" in \
            _notes(c, "007_stage_inputs")
    assert "never goes through global memory" in _notes(c, "fuse")
    for backend in ("loop", "sim"):
        assert c.check(backend=backend).ok, backend


def test_the_suite_silu_mul_matmul_is_one_kernel():
    e = next(e for e in suite_entries("llm") if e.name == "silu_mul_matmul.qwen.s32")
    c = deplokit.compile(e.program(), *e.inputs(empty=True), target="sm_90")
    assert len(c.loop_ir.kernels) == 1 and _prologue_stages(c)
    line = _notes(c, "fuse")
    got = re.search(r"block of 64 of the (\d+) columns it is shared by \((\d+)x\)", line)
    assert got and int(got[1]) == e.shapes[2][1] and int(got[2]) == -(-int(got[1]) // STAGED_TILE), line
    src = str(c.cuda)
    assert "expf" in src.split("__global__")[1]                   # silu inside the GEMM's copy


def test_a_prologue_whose_staged_recompute_costs_more_is_its_own_kernel():
    # ~160 statements per element, staged once per 64 columns of 640: > 1/3 of the K loop
    def heavy(g, u, w):
        x = g
        for _ in range(80):
            x = torch.sin(x) * u
        return x @ w
    gen = torch.Generator().manual_seed(0)
    c = deplokit.compile(heavy, torch.randn(16, 32, generator=gen), torch.randn(16, 32, generator=gen),
                         torch.randn(32, 640, generator=gen))
    store = next(n for s in c.trace if s.name == "fuse" for n in s.notes if n.startswith("store "))
    got = re.search(r"staged (\S+)x: extra work (\d+) > (\S+) x contraction work (\d+)", store)
    assert got, store
    assert int(got[2]) > CONTRACTION_BUDGET * int(got[4])
    assert len(c.loop_ir.kernels) == 2 and not _prologue_stages(c)


def test_a_broadcast_operand_is_not_staged_as_a_prologue():
    # scale[k] and x[m, k] are different slabs: 007 could not stage them as one, so the guard
    # counts the K loop's recompute (x·silu(scale) is its own kernel)
    gen = torch.Generator().manual_seed(0)
    c = deplokit.compile(lambda x, s, w: (x * F.silu(s)) @ w, torch.randn(16, 32, generator=gen),
                         torch.randn(32, generator=gen), torch.randn(32, 640, generator=gen))
    assert "staged prologue" not in _notes(c, "fuse")
    assert not _prologue_stages(c)
    assert c.check(backend="loop").ok


@pytest.mark.skipif(not nvcc_available(), reason="nvcc is not on PATH")
# the prologue copy loop is kept rolled (stage_units.copy_stage, `#pragma unroll 1`): llama
# down_proj_add spilled unrolled, and this one spilled 8 bytes on sm_80 while nvcc unrolled
# the plain strided loop by itself
@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
def test_nvcc_compiles_the_staged_prologue(target):
    c = _compile(37, 75, 53, target=target)
    assert _prologue_stages(c)
    assert re.search(r"#pragma unroll 1\n\s*for \(int g_u_smem_i = threadIdx\.x;", str(c.cuda))
    stats = compile_cuda(str(c.cuda), target, kernel_names=c.cuda.kernels).stats
    assert set(stats) == set(c.cuda.kernels)
    assert all(s.spills == 0 for s in stats.values())
