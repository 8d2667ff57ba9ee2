"""Flash attention's K/V tiles by tensor map (sm_90): 011 tma_copy takes the key-tile ring's
stages (one box per operand per key tile, issued by one thread into the mbarrier ring), the
simulator runs every variant with it against eager, sm_80 and sm_120 keep cp.async, the knob
turns it off, the host encodes the K/V maps, and rows dealt to lanes read K 16 bytes at once."""
import math
from functools import lru_cache

import pytest
import torch
import torch.nn.functional as F
from stage_helpers import step
from test_tma import _RecordingDriver

import deplokit
from deplokit.ir.tile_ir import Stage, walk
from deplokit.runtime.launch_plan import build_plan
from deplokit.runtime.nvcc import nvcc_available
from deplokit.runtime.sass import sass_available
from deplokit.runtime.tensor_map import encode

FLASH = {"fuse_attention.by_cost": False}
TILE = 16       # the key tile of these shapes (attention_plan.MAX_KEY_TILE)


def _r(*shape, seed=[100]):
    seed[0] += 1
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed[0]))


def _sdpa(causal=False):
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def _masked(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def _naive(q, k, v, m):
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + m, dim=-1) @ v


def _repeat_kv(q, k, v):
    """GQA written by hand: K and V repeated per query head."""
    k, v = k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1)
    return torch.softmax((q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1])), -1) @ v


def _by_hand(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1) @ v


def _bool_mask(s, t):
    m = torch.rand(1, 1, s, t, generator=torch.Generator().manual_seed(7)) > 0.4
    m[..., 2, :] = False            # a fully masked row: NaN, as eager gives
    return m


# key loops of several tiles (a ring to fill), T never a multiple of the tile
RING = {
    "hd64_t37": (_sdpa(), (_r(1, 2, 5, 64), _r(1, 2, 37, 64), _r(1, 2, 37, 64))),
    "gqa_hd80_t37": (_sdpa(), (_r(1, 4, 6, 80), _r(1, 2, 37, 80), _r(1, 2, 37, 80))),
    "mqa_hd96_t33": (_sdpa(), (_r(1, 3, 4, 96), _r(1, 1, 33, 96), _r(1, 1, 33, 96))),
    "hd128_lanes_t35": (_sdpa(), (_r(1, 2, 8, 128), _r(1, 2, 35, 128), _r(1, 2, 35, 128))),
    "decode_hd128_t40": (_sdpa(), (_r(1, 4, 1, 128), _r(1, 2, 40, 128), _r(1, 2, 40, 128))),
    "dv32_hd64_t20": (_sdpa(), (_r(1, 2, 6, 64), _r(1, 2, 20, 64), _r(1, 2, 20, 32))),
    "bool_mask_t24": (_masked, (_r(1, 2, 6, 32), _r(1, 2, 24, 32), _r(1, 2, 24, 32), _bool_mask(6, 24))),
    "additive_mask_t24": (_naive, (_r(1, 2, 5, 16), _r(1, 2, 24, 16), _r(1, 2, 24, 16), _r(5, 24))),
    "repeat_interleave_gqa_t40": (_repeat_kv, (_r(2, 6, 11, 16), _r(2, 2, 40, 16), _r(2, 2, 40, 16))),
    "by_hand_3d_t40": (_by_hand, (_r(3, 7, 32), _r(3, 40, 32), _r(3, 40, 32))),       # a 3-D box
}
CAUSAL = {
    "causal_hd64_t37": (_sdpa(True), (_r(1, 2, 37, 64), _r(1, 2, 37, 64), _r(1, 2, 37, 64))),
    "causal_gqa_hd96_t40": (_sdpa(True), (_r(1, 4, 40, 96), _r(1, 2, 40, 96), _r(1, 2, 40, 96))),
}
CASES = {**RING, **CAUSAL}


@lru_cache(maxsize=None)
def _compiled(name, target="sm_90", tma=None):
    fn, inputs = CASES[name]
    config = dict(FLASH, **({} if tma is None else {"011_tma_copy.enable": tma}))
    return deplokit.compile(fn, *inputs, config=config, target=target)


def _kv_stages(c):
    (k,) = c.tile_ir.kernels
    assert k.flash is not None, str(c.loop_ir)
    return {s.name: s for s, _ in walk(k.body) if isinstance(s, Stage) and s.name in ("k_smem", "v_smem")}


@pytest.mark.parametrize("name", sorted(RING))
def test_key_ring_stages_are_tensor_map_copies_and_match_eager(name):
    c = _compiled(name)
    _, inputs = CASES[name]
    stages = _kv_stages(c)
    for s, tensor in ((stages["k_smem"], inputs[1]), (stages["v_smem"], inputs[2])):
        want = (1,) * (tensor.dim() - 2) + (TILE, tensor.shape[-1])        # one key tile x head_dim
        assert (s.copy, s.buffers, s.tma.box, s.tma.swizzle) == ("tma", 2, want, 0), s.text()
        assert s.prefetch == 1
    (decision,) = step(c, "011_tma_copy").decisions
    assert "one tensor-map copy per operand per key tile" in decision.note
    assert "tmap=" in str(c.tile_ir) and "TmaBufferedStage(k" in str(c.tile_ir)
    res = c.check(backend="sim", rtol=1e-4, atol=1e-5)
    assert res.ok, str(res)


@pytest.mark.parametrize("name", sorted(CAUSAL))
def test_causal_variants_with_tma_on_match_eager_and_say_how_their_tiles_are_copied(name):
    """The causal key loop starts at the block's diagonal: where it has no ring, 011 says so
    and the tiles stay cp.async; with a ring they are tensor-map copies like the others."""
    c = _compiled(name, tma=True)
    stages = _kv_stages(c)
    kinds = {s.copy for s in stages.values()}
    if kinds != {"tma"}:
        assert kinds == {"async"}
        assert "causal key loop" in step(c, "011_tma_copy").skipped_reason
    res = c.check(backend="sim", rtol=1e-4, atol=1e-5)
    assert res.ok, str(res)


@pytest.mark.parametrize("name", ["dv32_hd64_t20", "hd128_lanes_t35"])
def test_the_simulator_checks_the_tma_ring_after_every_pass(name):
    checks = _compiled(name).check_passes()
    assert checks and all(ch.result.ok for ch in checks), [str(ch) for ch in checks]


@pytest.mark.parametrize("target", ["sm_80", "sm_120"])
def test_targets_without_tma_keep_cp_async(target):
    c = _compiled("gqa_hd80_t37", target)
    assert {s.copy for s in _kv_stages(c).values()} == {"async"}
    assert "TMA (bulk copies need sm_90)" in step(c, "011_tma_copy").skipped_reason
    assert "cp.async.bulk" not in str(c.cuda) and "cp.async.cg" in str(c.cuda)


def test_the_knob_turns_tma_off_for_flash():
    c = _compiled("hd64_t37", tma=False)
    stages = _kv_stages(c)
    assert {(s.copy, s.buffers) for s in stages.values()} == {("async", 2)}
    assert "disabled by the knob" in step(c, "011_tma_copy").skipped_reason
    assert c.check(backend="sim").ok


def test_a_single_key_tile_stays_cp_async_and_the_trace_says_why():
    fn = _sdpa()
    c = deplokit.compile(fn, _r(1, 2, 5, 32), _r(1, 2, 9, 32), _r(1, 2, 9, 32), config=FLASH)
    assert {s.copy for s in _kv_stages(c).values()} == {"async"}
    assert "every key fits one tile" in step(c, "011_tma_copy").skipped_reason


def test_unaligned_rows_fall_back_to_cp_async_with_the_reason():
    """head_dim 30: rows 120 bytes apart, no tensor map can stride them."""
    c = deplokit.compile(_sdpa(), _r(1, 2, 5, 30), _r(1, 2, 37, 30), _r(1, 2, 37, 30), config=FLASH)
    assert {s.copy for s in _kv_stages(c).values()} == {"async"}
    assert "not a multiple of 16" in step(c, "011_tma_copy").skipped_reason
    assert c.check(backend="sim").ok


def test_the_launch_plan_encodes_the_k_and_v_maps():
    """The host's cuTensorMapEncodeTiled arguments for k [B, Hkv, T, D] and v [B, Hkv, T, Dv]:
    dims and byte strides innermost first, the box one key tile of whole rows, zero fill past
    T; the ring's one arrival expects both boxes' bytes."""
    c = _compiled("dv32_hd64_t20")
    plan = build_plan(c.kernel_ir, c.input_names, c.target)
    (launch,) = [ln for ln in plan.launches if ln.tensor_maps]
    maps = {t.buffer: t for t in launch.tensor_maps}
    assert sorted(maps) == ["k", "v"] and [t.param for t in launch.tensor_maps] == ["k_tmap", "v_tmap"]
    for name, d in (("k", 64), ("v", 32)):
        a = maps[name].args
        assert (a.rank, a.data_type, a.swizzle, a.oob_fill) == (4, 7, 0, 0)
        assert a.global_dims == (d, 20, 2, 1) and a.box_dims == (d, TILE, 1, 1)
        assert a.global_strides == (4 * d, 4 * d * 20, 4 * d * 20 * 2)
    assert f'"r"({4 * TILE * (64 + 32)})' in str(c.cuda)          # arrive.expect_tx of k's and v's boxes
    assert "cp.async.bulk.tensor.4d" in str(c.cuda)
    driver = _RecordingDriver()
    encode(maps["k"].args, 0x7f0000001000, driver)
    (call,) = driver.calls
    assert call == dict(dtype=7, rank=4, address=0x7f0000001000, dims=(64, 20, 2, 1), strides=(256, 5120, 10240),
                        box=(64, TILE, 1, 1), elem=(1, 1, 1, 1), enums=(0, 0, 2, 0))


@pytest.mark.parametrize("name", ["mqa_hd96_t33", "hd128_lanes_t35", "decode_hd128_t40"])
def test_rows_dealt_to_lanes_read_keys_16_bytes_at_once(name):
    """head_dim split across lanes: each lane owns runs of 4 adjacent elements (element
    (dq * lanes + lane) * 4 + dv), so its key reads are one shared float4 (LDS.128)."""
    c = _compiled(name)
    (k,) = c.tile_ir.kernels
    assert k.flash.lanes > 1
    widths = {s.shared_width for s, _ in walk(k.body) if getattr(s, "tensor", "") == "k_smem"}
    assert widths == {4}, str(k)
    assert "reinterpret_cast<const float4*>(&k_smem[" in str(c.cuda)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
@pytest.mark.parametrize("name", ["mqa_hd96_t33", "decode_hd128_t40", "bool_mask_t24"])
def test_flash_kernels_compile(name, target):
    c = _compiled(name, target)
    assert ("cp.async.bulk.tensor" in str(c.cuda)) == (target == "sm_90")
    stats = c.nvcc().stats
    assert all(s.registers > 0 for s in stats.values())


@pytest.mark.skipif(not sass_available(), reason="nvcc and cuobjdump/nvdisasm not installed")
def test_the_key_loop_issues_one_tensor_copy_per_operand_and_reads_k_in_128_bits():
    """The machine code of the key-tile loop (sm_90): two UTMALDG (K and V) and no LDGSTS;
    a lane-split row's K and V read as LDS.128, one per quad of its head_dim (and output
    column) slice per key: each lane owns runs of 4 adjacent columns (flash_tile.spread_cols)."""
    c = _compiled("hd128_lanes_t35")
    (func,) = c.kernel_ir.kernels
    loop = c.sass().kernel(func.name).main_loop()
    assert (loop.mix.tma, loop.mix.ldgsts) == (2, 0)
    lanes = c.tile_ir.kernels[0].flash.lanes
    assert lanes > 1 and loop.mix.lds128 >= 2 * (TILE * 128 // lanes // 4)
