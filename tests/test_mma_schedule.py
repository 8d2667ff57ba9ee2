"""008 register_tile on tensor cores (knob mma=tf32): the Tile IR it makes, its MmaTile stamp and
fragment text, where it reads with ldmatrix, and where it refuses (the FMA tile instead)."""
import pytest
import torch

from deplokit.errors import DeplokitError
from deplokit.frontend.capture import capture
from deplokit.ir.fragments import M16N8K8_TF32, ptx_layout
from deplokit.ir.tile_ir import Stage, walk
from deplokit.passes.lower import LOWERING
from deplokit.passes.mma.mma_lower import lane_expr
from deplokit.passes.verify import verify
from deplokit.pipeline import PIPELINE, Context, run_passes
from deplokit.target import get_target

MMA = {"008_register_tile.mma": "tf32"}


def schedule(fn, *inputs, target="sm_80", config=MMA):
    """The Tile program after the 16 passes, and the trace."""
    # mma.sync reads tf32 operands: only a precision="tf32" program's (docs/precision.md)
    ctx = Context(get_target(target), config=config, precision="tf32" if "tf32" in config.values() else "float32")
    n = PIPELINE.index(LOWERING[0])
    _, steps = run_passes(PIPELINE[:n], capture(fn, inputs).program, ctx)
    verify(steps[-1].after, ctx.target)
    return steps[-1].after, steps


def step(steps, name):
    return next(s for s in steps if s.name == name)


def test_4096_matmul_on_tensor_cores():
    tile, _ = schedule(lambda a, b: a @ b, torch.randn(4096, 4096), torch.randn(4096, 4096))
    k = tile.kernels[0]
    text = str(k)
    assert k.mma is not None and k.mma.warps == (2, 4) and k.mma.tiles == (4, 4)
    assert ("mma acc0[4, 4, 4]: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, 2 x 4 warps of 64 x 32, "
            "fragments acc0_a[4, 4] acc0_b[4, 2]") in text
    assert "  fragment A m16n8k8.tf32 16x8: lane 4g+t holds a0=(g, t) a1=(g+8, t) a2=(g, t+4) a3=(g+8, t+4)" in text
    assert "Tile(axes=(a0w(M):2=THREAD, a1w(N):4=THREAD, a0g(M):8=THREAD, a1q(N):4=THREAD, a0b(M):32=BLOCK, " \
           "a1b(N):32=BLOCK))" in text
    # A is read along k (its rows are 16-byte rows of the slab): one ldmatrix.x4 per 16 x 8 tile;
    # B (k x n, n-major) gives each lane a column: one shared load per element
    assert "acc0_a[a0f] = fragment A a_smem[a0w * 64 + a0f * 16 + fr, a2i * 8 + fc]  # ldmatrix.x4" in text
    assert "acc0_b[a1f] = fragment B b_smem[a2i * 8 + fr, a1w * 32 + a1f * 8 + fc]  # lds" in text
    assert "acc0[a0f, a1f] <- mma.m16n8k8.tf32(acc0_a[a0f], acc0_b[a1f])" in text
    # the epilogue spells the C layout: row g + 8 * (c // 2), column 2t + c % 2
    assert ("matmul[a0b * 128 + a0w * 64 + a0f * 16 + a0g + (a0c // 2) * 8, "
            "a1b * 128 + a1w * 32 + a1f * 8 + a1q * 2 + (a0c % 2)] = acc0_v") in text


def test_linear_reads_both_operands_with_ldmatrix():
    """x @ w.T stages w n-major: B's registers are rows of the slab too (ldmatrix.x2; two
    adjacent n tiles at once: .x4)."""
    tile, _ = schedule(lambda x, w: torch.nn.functional.linear(x, w), torch.randn(256, 512), torch.randn(384, 512))
    text = str(tile.kernels[0])
    b = [line for line in text.splitlines() if "= fragment B" in line]
    assert "# ldmatrix.x4" in text and b and all(line.endswith("]  # ldmatrix.x4") for line in b)
    assert "+0..2] = fragment B" in b[0] and "# lds" not in text


def test_k_tail_grows_to_a_whole_k_step():
    """K = 70: 002's tail chunk of 6 is staged by itself; 008 grows its slabs to 8 (zeros past
    the tensor's end) and the tail is one more k step on tensor cores."""
    tile, _ = schedule(lambda a, b: a @ b, torch.randn(100, 70), torch.randn(70, 56))
    k = tile.kernels[0]
    assert k.mma is not None
    tails = [s for s, _ in walk(k.tile().body) if isinstance(s, Stage) and s.buffers == 1]
    assert tails and all(any(ax.extent == 8 for ax in s.slab) for s in tails)
    assert "K run of 6" not in str(k)


def test_default_is_exact_fp32():
    tile, steps = schedule(lambda a, b: a @ b, torch.randn(256, 64), torch.randn(64, 128), config={})
    assert tile.kernels[0].mma is None
    assert dict(dict(step(steps, "008_register_tile").params)["merged_matmul"])["mma"] == "off"


def test_odd_shape_tile_and_tail():
    tile, _ = schedule(lambda a, b: a @ b, torch.randn(100, 72), torch.randn(72, 56))
    k = tile.kernels[0]
    assert k.mma is not None
    text = str(k)
    # the K tail (72 = 4 x 16 + 8) is one k step on its own slab
    assert "for a2t in 0..1:  # reduce (K)" in text


def test_knob_in_the_tuners_space_only_where_precision_allows():
    import random

    import deplokit
    from deplokit.passes.schedule.t008_register_tile import PASS
    from deplokit.tune.space import kernel_spaces
    knob = next(k for k in PASS.knobs if k.name == "mma")
    assert knob.domain == ("off", "tf32", "half", "wgmma")
    # an exact float32 program: the tuner never trades its precision for tensor cores
    a, b = torch.randn(256, 64), torch.randn(64, 128)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80")
    space = kernel_spaces(c.loop_ir, c.target)[0]
    rng = random.Random(0)
    seen = {dict(space.random_leaf(rng)[1].config)["008_register_tile.mma"] for _ in range(12)}
    assert seen == {"off"}


def test_lane_expressions_from_tables():
    lay = ptx_layout(M16N8K8_TF32, "A")
    assert str(lane_expr([lay.coords[lane][1][0] for lane in range(32)], "g", "t")) == "g + 8"
    assert str(lane_expr([lay.coords[lane][2][1] for lane in range(32)], "g", "t")) == "t + 4"
    # ldmatrix.x4's row addresses: row l % 8 + 8 * ((l // 8) % 2), a mix of g's and t's bits
    rows = [lane % 8 + 8 * (lane // 8 % 2) for lane in range(32)]
    assert str(lane_expr(rows, "g", "t")) == "t + (g % 2) * 4 + (g // 2 % 2) * 8"
    with pytest.raises(DeplokitError, match="not linear"):
        lane_expr([lane * lane for lane in range(32)], "g", "t")


def test_work_counts_the_tensor_core_flops():
    from deplokit.analysis.work import count_work
    a, b = torch.randn(256, 64), torch.randn(64, 128)
    fma, _ = schedule(lambda a, b: a @ b, a, b, config={})
    mma, _ = schedule(lambda a, b: a @ b, a, b)
    w_fma, w_mma = (count_work(t.kernels[0], t.types()) for t in (fma, mma))
    assert w_mma.flops == w_fma.flops == 2 * 256 * 64 * 128
    assert w_mma.fp_instructions == 0 and w_mma.instructions < w_fma.instructions / 10
