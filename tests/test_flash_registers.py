"""The flash plan's register budget (passes/flash/flash_registers.py, attention_plan.py) and the
warp reconvergence before a lane-split row's shuffle (passes/lower/k004_reconverge_warps.py):
the rows and lanes a block gets fit the registers its thread count leaves a thread, the trace
says so, and ptxas spills nothing over a spread of attention shapes on sm_80 and sm_90."""
import pytest
import torch
import torch.nn.functional as F

import deplokit
from deplokit.ir import kernel_ir as K
from deplokit.passes.flash.attention_plan import plan_flash
from deplokit.passes.flash.flash_registers import WARPS_GOAL, budget, register_cap, thread_registers
from deplokit.runtime.nvcc import nvcc_available

FLASH = {"fuse_attention.by_cost": False}


def _sdpa(causal):
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def _compile(heads, kv_heads, seq, keys, d, dv, causal, target="sm_90"):
    g = torch.Generator().manual_seed(0)
    inputs = (torch.randn(1, heads, seq, d, generator=g), torch.randn(1, kv_heads, keys, d, generator=g),
              torch.randn(1, kv_heads, keys, dv, generator=g))
    return deplokit.compile(_sdpa(causal), *inputs, config=FLASH, target=target)


def _flash(c):
    return next(k for k in c.loop_ir.kernels if k.flash is not None)


def _unfilled(c):
    """The plan as registers size it, before the grid fill (no SM count) changes its tile."""
    return plan_flash(_flash(c), c.loop_ir.types())


def test_the_cap_is_the_register_file_shared_by_the_block():
    assert register_cap(512) == 128 and register_cap(448) == 144     # 65536 / threads, in steps of 8
    assert register_cap(224) == 255 and register_cap(32) == 255      # a thread addresses at most 255
    # head_dim 128 dealt to 2 lanes: 64 + 64 query and output floats, 16 scores, max and sum
    assert thread_registers(128, 128, 16, 2) > register_cap(512)
    assert budget(128, 128, 16, 2, 224).fits and not budget(128, 128, 16, 2, 448).fits
    assert thread_registers(128, 128, 16, 2, query_in_registers=False) < thread_registers(128, 128, 16, 2)


def test_noncausal_gqa_hd128_block_fits_its_register_cap_and_the_trace_says_why():
    """Group 4, 64 query rows and 2 lanes a row made 512-thread blocks capped at 128 registers
    (800 bytes spilled): the plan halves the query tile until a thread's estimate fits."""
    c = _compile(8, 2, 64, 64, 128, 128, False)
    for plan, text in ((_flash(c).flash, " ".join(n for s in c.trace for n in s.notes)),
                       (_unfilled(c), _unfilled(c).text())):     # with and without the grid fill
        threads = plan.group * plan.query_tile * plan.lanes
        fit = budget(128, 128, plan.key_tile, plan.lanes, threads)
        assert fit.fits and threads <= 256 and plan.query_tile >= 16
        assert f"about {fit.estimate} registers a thread fit the cap of {fit.cap} for {threads} threads" in text
    assert "exceed the cap" in text        # the larger tile it turned down, and why


def test_a_row_that_fits_whole_is_dealt_to_lanes_for_occupancy():
    """64 + 64 + 16 floats fit one thread (about 242 registers) but leave an SM 8 warps: two
    lanes a row (about 128 registers) keep 16, the goal; the trace gives both."""
    plan = _unfilled(_compile(8, 8, 64, 64, 64, 64, False))
    assert plan.lanes == 2 and plan.query_tile == 64
    one, two = budget(64, 64, 16, 1, 64), budget(64, 64, 16, 2, 128)
    assert one.fits and one.warps < WARPS_GOAL <= two.warps
    assert f"1 lane a row: {one.estimate} registers, {one.warps} warps an SM" in plan.text()
    fit = f"about {two.estimate} registers a thread fit the cap of 255 for 128 threads, {two.warps} warps"
    assert fit in plan.text()


def test_head_dim_128_four_lanes_a_row_and_value_quads():
    """Head_dim 128 (qwen's): two lanes a row need about 227 registers (ptxas: 248), 8 warps
    an SM; four lanes, 256-thread blocks at about 128. Each lane owns runs of 4 adjacent output
    columns, so 4 slots of its value loop read 4 adjacent, aligned floats of the staged tile
    (one LDS.128; ptxas showed 512 scalar LDS become 128 LDS.128, loop FFMA share 0.53 -> 0.66)."""
    c = _compile(4, 4, 64, 64, 128, 128, False)
    plan = _flash(c).flash
    assert plan.lanes == 4 and plan.group * plan.query_tile * plan.lanes <= 256
    assert budget(128, 128, 16, 4, 256).warps >= WARPS_GOAL > budget(128, 128, 16, 2, 128).warps
    from deplokit.ir.loop_ir import Load
    from deplokit.ir.tile_ir import Stage, walk
    from deplokit.passes.vector_geometry import register_quad_width
    body = c.tile_ir.kernels[0].tile().body
    stages = {s.name: s for s, _ in walk(body) if isinstance(s, Stage)}
    quads = {s.tensor: register_quad_width(s, stages[s.tensor], loops[-1]) for s, loops in walk(body)
             if isinstance(s, Load) and s.tensor in stages and loops[-1].kind == "register"}
    assert len(stages) == 2 and quads == {name: 4 for name in stages}, quads     # keys and values


def test_syncwarp_between_the_copy_branch_and_the_lanes_shuffle():
    """A lane-split row (head_dim 128, 2 lanes) with its K/V tiles issued by thread 0 inside
    the key loop: a SyncWarp after that branch, before the shuffle, in the same loop body."""
    c = _compile(8, 2, 64, 64, 128, 128, False)
    kernel = c.kernel_ir.kernels[0]
    loops = [s for s in K.walk_stmts(kernel.body) if isinstance(s, K.For)
             and any(isinstance(t, K.SyncWarp) for t in s.body)]
    assert loops, str(c.kernel_ir)
    body = loops[0].body
    at = next(i for i, t in enumerate(body) if isinstance(t, K.SyncWarp))
    assert any(isinstance(t, K.If) for t in body[:at])
    assert "__syncwarp();" in str(c.cuda)
    assert any("004_reconverge_warps" == s.name and s.changed for s in c.trace)


def test_no_syncwarp_without_a_shuffle():
    """One thread a row (head_dim 89: odd, the query rows in shared memory): no warp
    collective, nothing to reconverge for."""
    c = _compile(4, 4, 64, 64, 89, 89, False)
    assert _flash(c).flash.lanes == 1
    assert not any(isinstance(s, K.SyncWarp) for k in c.kernel_ir.kernels for s in K.walk_stmts(k.body))


SPREAD = {      # heads, kv heads, seq, keys, head_dim, value dim, causal
    "noncausal_gqa4_hd128_s64": (8, 2, 64, 64, 128, 128, False),
    "noncausal_gqa7_hd96_s128": (28, 4, 128, 128, 96, 96, False),
    "causal_gqa7_hd128_s128": (28, 4, 128, 128, 128, 128, True),
    "noncausal_mqa_hd128_s512": (8, 1, 512, 512, 128, 128, False),
    "causal_mha_hd80_s64": (4, 4, 64, 64, 80, 80, True),
    "decode_gqa8_hd128": (32, 4, 1, 256, 128, 128, False),
    "noncausal_gqa4_dv128_hd64": (8, 2, 128, 128, 64, 128, False),
    "noncausal_mha_hd64_s256": (4, 4, 256, 256, 64, 64, False),
    "noncausal_mha_hd64_t37": (2, 2, 37, 37, 64, 64, False),    # spilled on sm_80 a row a thread
    # plans the grid fill reshaped (test_flash_fill.py): sub-grouped heads, halved query tiles
    "fill_causal_gqa4_subgrouped": (8, 2, 64, 64, 32, 32, True),
    "fill_noncausal_mha_smaller_tile": (4, 4, 128, 128, 32, 32, False),
    "fill_noncausal_gqa4_subgrouped": (8, 2, 64, 64, 32, 32, False),
    "fill_decode_gqa4": (8, 2, 1, 256, 64, 64, False),
}


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(SPREAD))
def test_flash_kernels_spill_nothing(name, target):
    c = _compile(*SPREAD[name], target=target)
    stats = c.nvcc().stats
    flash = [k.name for k in c.kernel_ir.kernels if k.name.startswith("flash")]
    assert flash
    for k in flash:
        assert stats[k].spills == 0 and stats[k].registers <= 255, (k, stats[k])


def test_without_tma_a_row_needs_more_registers():
    # sm_80's cp.async ring: head_dim 64 a whole row a thread spilled 24..232 bytes at 255
    # registers there (37 keys); the estimate deals it to two lanes on sm_80 and not on sm_90
    assert thread_registers(64, 64, 16, 1, tma=False) > 255 >= thread_registers(64, 64, 16, 1)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 37, 64, generator=g) for _ in range(3))
    plans = {t: next(x.flash for x in deplokit.compile(fn, q, k, v, target=t, config=FLASH).loop_ir.kernels
                     if x.flash is not None) for t in ("sm_80", "sm_90")}
    lanes = {t: p.lanes for t, p in plans.items()}
    # sm_90 deals it to 2 lanes too, but for occupancy (one lane a row fits, 8 warps an SM);
    # on sm_80 one lane a row does not fit its cap at all
    assert lanes == {"sm_80": 2, "sm_90": 2}
    texts = {t: p.text() for t, p in plans.items()}
    assert "1 lane a row" in texts["sm_90"] and "1 lane a row" not in texts["sm_80"]


def test_an_output_row_past_the_register_cap_keeps_the_kernels_separate():
    """Fuzz seed 101 case 77: head_dim 1000 (lanes at most 8, still over the cap) fell back to
    the query rows in shared memory with a whole 1000-float output row a thread (~1100
    registers): one thread a block, spilled on a GPU and minutes in the simulator. Now the
    kernels stay separate, the trace says why, and the simulator matches eager at once."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 1, 1000, generator=g)
    k, v = torch.randn(1, 1, 33, 1000, generator=g), torch.randn(1, 1, 33, 1000, generator=g)
    c = deplokit.compile(_sdpa(False), q, k, v, target="sm_90")
    assert all(kern.flash is None for kern in c.loop_ir.kernels)
    notes = next(s.skipped_reason for s in c.trace if s.name.endswith("fuse_attention"))
    assert "output row of 1000 floats does not fit its registers" in notes and "exceed the cap of 255" in notes
    torch.testing.assert_close(c.run(q, k, v, backend="sim"), _sdpa(False)(q, k, v), rtol=1e-4, atol=1e-4)
    # a head_dim whose row fits whole (33) still gets its flash kernel
    small = deplokit.compile(_sdpa(False), q[..., :33], k[..., :33], v[..., :33], target="sm_90", config=FLASH)
    assert _flash(small).flash is not None


def _unrolled_multiplies(kernel) -> int:
    """Multiplies in a thread's code once register loops and unroll-marked loops are copied out."""
    from deplokit.ir.loop_ir import Compute, Loop
    from deplokit.ir.tile_ir import walk
    total = 0
    for s, loops in walk(kernel.body):
        if isinstance(s, Compute) and s.op == "multiply":
            copies = 1
            for lp in loops:
                if isinstance(lp, Loop) and (lp.kind == "register" or lp.unroll):
                    copies *= lp.extent
            total += copies
    return total


def test_an_odd_head_dim_keeps_the_unrolled_key_tile_within_budget():
    """Fuzz seeds 303 case 442 and 403 case 351 (NVRTC over 60 s): head_dim 127 cannot be dealt
    to lanes, so a thread's key tile of 16 keys unrolled 16 x (127 + 127) = 4064 multiply-adds
    (nvcc 40 s of CPU). The plan halves the key tile (and a causal plan's query tile) until
    they fit UNROLL_BUDGET, and says so; the result still matches eager on the simulator."""
    from deplokit.passes.flash.attention_plan import UNROLL_BUDGET, unroll_capped
    assert unroll_capped(127, 127, 64, 16, 1, False)[:2] == (64, 8)        # not causal: the rows stay
    assert unroll_capped(128, 128, 16, 16, 2, True) == (16, 16, "")         # 16 x 128 over two lanes
    assert unroll_capped(64, 64, 64, 16, 1, False) == (64, 16, "")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 9, 127, generator=g) for _ in range(3))
    c = deplokit.compile(_sdpa(True), q, k, v, config=FLASH, target="sm_90")
    plan = _flash(c).flash
    assert (plan.lanes, plan.key_tile, plan.query_tile) == (1, 8, 8)
    assert f"key tile 8: 16 keys x 254 (head_dim + columns a thread) would unroll 4064 multiply-adds, " \
           f"over {UNROLL_BUDGET}" in plan.text()
    flash = next(kern for kern in c.tile_ir.kernels if kern.flash is not None)
    assert _unrolled_multiplies(flash) <= UNROLL_BUDGET + 127 + 16     # + the output's rescale, the scores' scale
    torch.testing.assert_close(c.run(q, k, v, backend="sim"), _sdpa(True)(q, k, v), rtol=1e-4, atol=1e-4)
