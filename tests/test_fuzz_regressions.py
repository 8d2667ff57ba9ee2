"""Failure classes the long fuzz runs found (python -m deplokit.fuzz --seed S), each as the
smallest program that showed it, replayed through the fuzzer's own check (every backend
against eager, NaN-poisoned outputs, NVRTC where available) and nvcc."""
import pytest
import torch
import torch.nn.functional as F

import deplokit
from deplokit.fuzz.programs import Case
from deplokit.fuzz.runner import compile_case, run_case
from deplokit.runtime.nvcc import nvcc_available

CASES = {
    # seed 24 case 259: a matmul's register tile summed again in the same kernel (a sum over
    # an axis the matmul's result is broadcast along): the epilogue's reduce loop folded the
    # register array acc0 as a scalar ("register array acc0 used as a scalar")
    "matmul then sum over a size-1 axis": (
        "x0 = torch.randn(127, 3)\nx1 = torch.randn(3, 31)\n(x0 @ x1).unsqueeze(0).sum(0)",
        "sm_90",
        {},
    ),
    "matmul then amax over a broadcast axis": (
        "x0 = torch.randn(127, 3)\nx1 = torch.randn(3, 31)\n(x0 @ x1).unsqueeze(0).expand(3, 127, 31).amax(0) * 2",
        "sm_80",
        {"008_register_tile.tn": 2},
    ),
    "attention heads summed": (
        "x0 = torch.randn(127, 31)\nx1 = torch.randn(1, 2, 3, 31)\nx2 = torch.randn(1, 2, 3, 31)\n"
        "F.scaled_dot_product_attention(x0.unsqueeze(0).unsqueeze(0).expand(1, 4, 127, 31), "
        "x1, x2, enable_gqa=True).sum(-4)",
        "sm_120",
        {"005_blockify_launch.block_threads": 512, "008_register_tile.tn": 2},
    ),
    # seed 26 case 213: softplus(x) = log(1 + exp(x)) was 0 once 1 + exp(x) rounded to 1
    # (x < -16.6; torch: log1p, 6e-8), and a mask (softplus(x) > 0) flipped
    "softplus near zero decides a mask": (
        "x0 = torch.randn(127, 33)\nx1 = torch.randn(33, 3)\nv1 = F.softplus(x0 @ x1)\n"
        "((v1 > 0).long().cumsum(-1) - 1).masked_fill(v1 <= 0, 1).float() * v1",
        "sm_120",
        {"008_register_tile.tm": 4},
    ),
    # seed 405 case 32 (the harness, not the compiler): a remainder right after a 12,289-long
    # sum; the in-kernel split-K sum rounds in another order than eager and the remainder
    # jumps by its divisor. The reference's spread now moves a sum by one rounding of its
    # terms' magnitudes (fuzz/reference.py), so the jump is seen as the rounding it is
    "remainder right after a long split sum": (
        "x0 = torch.randn(2, 12289)\nv0 = F.leaky_relu(x0, 0.2)\nx1 = torch.randn(3, 12289)\nx2 = torch.randn(3,)\n"
        "v1 = F.linear(v0, x1, x2)\nx3 = torch.randint(-3, 3, (3,))\nv2 = v1[:, x3]\nv3 = v2.pow(2)\n"
        "v4 = v3.amin(-1, keepdim=False)\ntorch.remainder(v4 * 4, -0.75)",
        "sm_90",
        {"003_split_matmul_k.reduce": "in_kernel", "008_register_tile.tm": 8, "fuse_rows.by_cost": False,
         "fuse_rows.enable": True},
    ),
    # seed 406 case 922 (a silently wrong number, and at default knobs too): rows merged from
    # two axes by a reshape, x.reshape(B * T, K) @ w.t() with T the block's rows. 005 writes
    # row b*T + t as x[b, t, k]; 008's register block (t -> r*T + t, b -> b*n) then ran t past
    # the inner axis. 008 now leaves such an axis one row a thread and says why
    "rows merged by a reshape, at default knobs": (
        "x0 = torch.randn(2, 16, 96)\nx1 = torch.randn(3, 96)\nx0.reshape(32, 96) @ x1.t()",
        "sm_90",
        {},
    ),
    "rows merged by a reshape, the fuzz case": (
        "x0 = torch.randn(2, 72, 3, 32)\nx1 = torch.randn(3, 96)\nx2 = torch.randn(3,)\n"
        "v0 = F.linear(x0.reshape(2, 72, 96), x1, x2)\nv1 = v0.clamp(-0.5, 1.5)\nv2 = F.leaky_relu(v1, 0.2)\n"
        "v3 = torch.where(v2 > 1.8, float(\"nan\"), torch.where(v2 < -2.2, float(\"-inf\"), v2)) + v1\n"
        "v5 = nn.Conv1d(72, 72, 1, groups=72, padding=0)(v3)[..., :3]\nv5.contiguous().view(144, 3)",
        "sm_80",
        {"002_chunk_matmul_k.k_chunk": 16, "003_split_matmul_k.reduce": "in_kernel",
         "005_blockify_launch.thread_shape": "8x8", "010_double_buffer.enable": True, "014_pad_smem.pad": 0,
         "015_pipeline_k_outer.enable": True, "016_mark_unroll.max_trip": 32, "fuse_attention.by_cost": True,
         "fuse_attention.mma": "half", "fuse_rows.enable": True},
    ),
    # seed 38: attention of one query row (scores a vector, no row loop): attention
    # fusion's matcher indexed the last of zero row loops (IndexError, a traceback); it is
    # not flash attention's shape, and row fusion keeps it on chip
    "attention of one query row": (
        "x0 = torch.randn(33)\nx1 = torch.randn(65, 33)\nx2 = torch.randn(65, 17)\ntorch.softmax(x1 @ x0, -1) @ x2",
        "sm_90",
        {},
    ),
    # seed 40: an index tensor (negative positions wrapped: x1_pos = where(x1 < 0, x1 + 2, x1))
    # read through stack's padded maps: fusion put x1_pos[0] in the pad's bounds test without
    # storing x1_pos (KeyError in 001 materialize, a traceback); now it is stored, as an index
    # a load reads is
    "index positions in a padded map's bounds test": (
        "x0 = torch.randn(3)\nx1 = torch.randint(-2, 2, (1,))\ntorch.stack([x0, x0 * 2], 1)[..., x1]",
        "sm_80",
        {},
    ),
    # seed 101 case 77 (a timeout, past the fuzzer's wall limit): head_dim 1000 attention went
    # to a flash kernel with a whole 1000-float output row a thread (~1100 registers, one
    # thread a block, 40 s simulated); such a row now keeps the kernels separate
    "attention with head_dim 1000 then rms_norm": (
        "x0 = torch.randn(1, 1000)\nv0 = torch.logsumexp(x0, -2, keepdim=True)\n"
        "x1 = torch.randn(1, 1, 33, 1000)\nx2 = torch.randn(1, 1, 33, 1000)\n"
        "v1 = F.scaled_dot_product_attention(v0.unsqueeze(0).unsqueeze(0).expand(1, 2, 1, 1000), x1, x2, "
        "enable_gqa=True)\nv2 = v1 + F.rms_norm(v1, (1000,))\nF.silu(v2) + v1",
        "sm_90",
        {"005_blockify_launch.vector_width": 1, "005_blockify_launch.thread_shape": "4x32",
         "006_chunk_reduce.smem_budget": 32768, "007_stage_inputs.stage": False, "013_async_copy.enable": True,
         "016_mark_unroll.unroll_k": True},
    ),
    # seed 403 case 661 (528 of 528 values silently wrong on the simulator): split_reduce cut K
    # = 93 into 2 chunks of 64 (index a2s * 64 + k); 003 then split each chunk's 16 K chunks 5
    # ways, overhanging by 4 chunks "read as zeros", but past a2s = 0's chunk lie a2s = 1's
    # elements, added twice. 003 now overhangs only where the reads past K are provably outside
    # the tensors (else the leftover chunks go to the reducer)
    "split_reduce's K chunks split again by 003": (
        "x0 = torch.randn(33, 31, 3)\nx1 = torch.randn(16, 93)\nx2 = torch.randn(16,)\n"
        "v0 = F.linear(x0.reshape(33, 93), x1, x2)\nv1 = F.normalize(v0, dim=-1)\n"
        "v2 = torch.softmax(v1, -1) + v0\nv2, v1",
        "sm_80",
        {"002_chunk_matmul_k.k_chunk": 4, "split_reduce.splits": 64},
    ),
    # seed 405 case 540: a flash kernel followed by a row kernel and another attention: fuse_rows
    # took the flash kernel into a row chain and priced its online state (row_max) as a tensor
    # seed 412 case 1498 (default knobs too): triu(q) fused into attention's dot product
    # computes with the query row's position, which the flash kernel's re-tiling left unbound
    # (a verifier error); match_attention now leaves such a chain unfused
    "a position mask on q fused into attention's scores": (
        "x0 = torch.randn(1, 129, 31)\nx1 = torch.randn(1, 129, 31)\nx2 = torch.randn(1, 129, 31)\n"
        "(F.scaled_dot_product_attention(torch.triu(x0, -1), x1, x2) + x0).contiguous() + x0",
        "sm_120",
        {"005_blockify_launch.block_threads": 512, "008_register_tile.layout": "warps"},
    ),
    "a position mask on k fused into attention's scores": (
        "x0 = torch.randn(1, 40, 16)\nx1 = torch.randn(1, 40, 16)\nx2 = torch.randn(1, 40, 16)\n"
        "F.scaled_dot_product_attention(x0, torch.tril(x1, 2), x2)",
        "sm_90",
        {},
    ),
    # seed 510 case (bf16, and at default knobs in fp32 too: a silently wrong number on the
    # simulator): attention's output transposed, (P @ V)^T, at S = D = 3. Its P @ V kernel
    # loops over d outermost, as many as the softmax's query rows, so fuse_rows took d for the
    # row loop and kept one row of P on chip while the loads of P walked every row. An access
    # of a row tensor that its every row loop does not index now keeps the kernels apart
    "attention transposed at as many rows as head dims": (
        "x0 = torch.randn(3, 3)\nx1 = torch.randn(1, 3, 3, 3)\nx2 = torch.randn(1, 3, 3, 3)\n"
        "x4 = torch.randn(3, 3)\n"
        "v0 = F.scaled_dot_product_attention(x0.unsqueeze(0).unsqueeze(0).expand(1, 3, 3, 3), x1, x2, "
        "attn_mask=x4 > -1)\n1 - torch.tanh(v0.transpose(3, 2))",
        "sm_90",
        {},
    ),
    # seed 421 (fp32, a silently wrong number at default knobs: 948 of 961 values off on the
    # simulator): an int64 sum's .float() + x staged as a linear's A operand with its prologue
    # (007); the shared array and its loads kept the tensor's int64, so the float sum was
    # truncated. A stage with a prologue holds float32 (smem_layout.stage_value_dtype)
    "an integer sum cast to float as a staged prologue": (
        "x0 = torch.randn(31, 3)\nx1 = torch.randint(0, 3, (31, 3))\nx2 = torch.randn(3, 31)\n"
        "v0 = F.gelu(F.embedding(x1, x2) + x0.unsqueeze(-1), approximate=\"tanh\")\n"
        "v2 = (v0 * 8).to(torch.long).sum(-1).float() + x0\nF.linear(v2, torch.randn(31, 3), torch.randn(31))",
        "sm_80",
        {},
    ),
    "attention, a row statistic, attention again": (
        "x0 = torch.randn(31, 3, 3)\nx1 = torch.randn(31, 3, 3)\nx2 = torch.randn(31, 3, 3)\n"
        "v1 = F.scaled_dot_product_attention(x0, x1, x2).std(-1, keepdim=True)\n"
        "F.scaled_dot_product_attention(v1.transpose(2, 1), torch.randn(31, 1, 3), torch.randn(31, 1, 3))",
        "sm_90",
        {},
    ),
}


def test_softplus_keeps_its_relative_accuracy_below_zero():
    x = torch.tensor([-100.0, -30.0, -17.0, -16.5, -10.0, -1.0, -1e-3, 0.0, 1.0, 19.9, 20.5])
    for fn in (F.softplus, lambda t: F.softplus(t, beta=2.0, threshold=5.0), F.mish):
        c = deplokit.compile(fn, x)
        for backend in ("tensor", "loop", "sim"):
            got, want = c.run(x, backend=backend), fn(x)
            assert float(((got - want).abs() / want.abs().clamp(min=1e-38)).max()) < 1e-6, backend


def test_values_hoisted_between_free_loops_do_not_serialise_the_kernel():
    """seed 25 case 37 (a timeout, 81 s on the simulator): attention, unsqueeze, then cat on
    the new axis. The pad guard less(a0, 3) was hoisted between the free loops, so 001
    tileify lifted only a0: one block of 4 threads, each running 33 x 129 attention rows.
    Every output is now a thread's (or one of a thread's register tile of <= 16)."""
    q, k, v, extra = (
        torch.randn(3, 33, 129),
        torch.randn(3, 33, 129),
        torch.randn(3, 33, 129),
        torch.randn(1, 1, 33, 129),
    )
    fn = lambda q, k, v, e: torch.cat([F.scaled_dot_product_attention(q, k, v).unsqueeze(0), e], 1)  # noqa: E731
    c = deplokit.compile(fn, q, k, v, extra)
    padded = next(k for k in c.kernel_ir.kernels if k.name == "merged_unsqueeze_pad")
    assert padded.grid[0] * padded.grid[1] * padded.grid[2] * padded.threads >= 4 * 33 * 129 // 16
    torch.testing.assert_close(c.run(q, k, v, extra, backend="sim"), fn(q, k, v, extra), rtol=1e-4, atol=1e-5)
    # the chain hoisted out of the inner loop stays hoisted in Loop IR (fusion's decision)
    chain = deplokit.compile(lambda a, b: torch.sigmoid(torch.sin(a))[:, None] * b[None, :], torch.randn(64),
                             torch.randn(1000))
    tiled = chain.kernel_ir.kernels[0]
    assert tiled.grid[0] * tiled.grid[1] * tiled.grid[2] * tiled.threads >= 64 * 1000 // 16


def test_row_fusion_keeps_a_transposed_attention_output_apart():
    q, k, v = (torch.randn(1, 2, 4, 4) for _ in range(3))
    c = deplokit.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v).transpose(3, 2), q, k, v)
    (step,) = [s for s in c.trace if s.name == "fuse_rows"]
    assert "probs[0, a0, a2, a3] in merged_transpose is not indexed by its every row loop" in step.skipped_reason
    assert not any(k.locals for k in c.loop_ir.kernels)
    assert c.check(backend="sim").passed


@pytest.mark.parametrize("start,stop,unit,target", [(3, 124, "fma", "sm_80"), (3, 124, "fma", "sm_90"),
                                                     (8, 129, "mma", "sm_80"), (0, 128, "mma", "sm_80")])
def test_a_k_tail_grows_to_a_whole_k_step_only_over_zeros(start, stop, unit, target):
    """Fuzz seed 520 (bf16, a silently wrong number at default knobs on every tensor-core
    target): mma.sync's k step of 16 grew x0[..., 3:124] @ x1[3:124]'s K tail of 9 to 16 on the
    promise of zeros past K, but past K lie both operands' next elements. A tail now grows only
    where one operand's elements past K are outside its tensor; else the FMA tile keeps it."""
    g = torch.Generator().manual_seed(start)
    a, b = torch.randn(64, 129, generator=g).bfloat16(), torch.randn(129, 33, generator=g).bfloat16()
    c = deplokit.compile(lambda a, b: a[..., start:stop] @ b[start:stop], a, b, target=target)
    assert ("mma" if c.tile_ir.kernels[0].mma is not None else "fma") == unit
    if unit == "fma":
        (step,) = [s for s in c.trace if s.name == "008_register_tile"]
        assert any("would read elements past K inside both operands" in r for r in step.remarks)
    assert c.check(backend="sim").passed


@pytest.mark.parametrize("name", CASES)
def test_fuzz_finding_stays_fixed(name):
    text, target, config = CASES[name]
    out = run_case(Case(0, 0, text, (name,), target, config), timeout=120.0, twice=True)
    assert out.status == "ok", f"{out.stage}: {out.message}"


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("name", list(CASES)[:2])
def test_fuzz_finding_passes_nvcc(name):
    text, target, config = CASES[name]
    c, _ = compile_case(Case(0, 0, text, (name,), target, config))
    c.nvcc()
