"""The ring of a key loop whose trip count depends on the block (flash attention's causal
key loop, from the block's diagonal tile down to tile 0: passes/lower/k002_stage_copies.py,
stage_plan.iteration): exact against eager on the simulator with the ring on, for T not a
multiple of the tile, one to three tiles, decode and GQA, on sm_80 (cp.async) and sm_90
(the TMA / mbarrier ring); bit-identical to one buffer for every trip count,
0 included; a missing wait, an uncounted cp.async group and a wrong phase caught by the
simulator; the CUDA through nvcc."""
import dataclasses
from functools import lru_cache

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from stage_helpers import nodes

import deplokit
from deplokit.ir import kernel_ir as K
from deplokit.ir.kernel_cp_async import CpAsyncCommit, CpAsyncWait
from deplokit.ir.kernel_tma import MbarrierWait
from deplokit.ir.tile_ir import Stage, StridedLoop, Tile
from deplokit.passes.lower.materialize import lower_tiles
from deplokit.passes.record import replace_tile
from deplokit.runtime.nvcc import nvcc_available
from deplokit.runtime.sim import SimulationError

FLASH = {"fuse_attention.by_cost": False}
TARGET_OF = {"async": "sm_80", "tma": "sm_90"}      # how the ring's K/V tiles are copied there


def _r(*shape, seed=[100]):
    seed[0] += 1
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed[0]))


def _sdpa(causal=True):
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


# key tiles of 16: T = 70 ends in a partial tile; 16 / 32 / 48 are one, two and three tiles
CASES = {
    "t70_partial_tile_gqa": (True, (1, 4, 70, 80), (1, 2, 70, 80)),
    "one_tile": (True, (1, 2, 16, 32), (1, 2, 16, 32)),
    "two_tiles_gqa": (True, (2, 4, 32, 64), (2, 1, 32, 64)),
    "three_tiles_hd128_lanes": (True, (1, 4, 48, 128), (1, 2, 48, 128)),
    "decode": (False, (1, 8, 1, 64), (1, 2, 45, 64)),
}


def _inputs(name):
    _, qs, ks = CASES[name]
    return _r(*qs), _r(*ks), _r(*ks)


@lru_cache(maxsize=None)
def _compiled(name, target="sm_90", stages=2, ring=True):
    causal, *_ = CASES[name]
    config = {**FLASH, "010_double_buffer.stages": stages}
    if not ring:
        config["010_double_buffer.enable"] = False
    return deplokit.compile(_sdpa(causal), *_inputs(name), target=target, config=config)


def _key_loop(c):
    return next(s for s in c.tile_ir.kernels[0].tile().body if getattr(s, "kind", "") == "serial")


@pytest.mark.parametrize("target,stages", [("sm_80", 2), ("sm_90", 3), ("sm_90", 4)])
@pytest.mark.parametrize("name", sorted(CASES))
def test_ring_matches_eager(name, target, stages):
    c = _compiled(name, target, stages)
    loop = _key_loop(c)
    heads = [s for s in loop.body if isinstance(s, Stage)]
    if CASES[name][2][2] > 16:      # more than one key tile: a ring, pipelined
        assert heads and all(s.buffers >= 2 and s.prefetch == s.buffers - 1 for s in heads), str(c.tile_ir)
    else:                           # one tile: nothing to overlap, and 010 says so
        assert heads and all(s.buffers == 1 for s in heads)
        assert "runs once" in next(s for s in c.trace if s.name == "010_double_buffer").skipped_reason
    assert isinstance(loop, StridedLoop) == CASES[name][0]          # causal: from the diagonal tile
    res = c.check(backend="sim", rtol=1e-4, atol=1e-5)
    assert res.ok, str(res)


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_the_simulator_runs_the_causal_ring_after_every_pass(target):
    """After 010 the ring is copied by the threads (slot j % 3), after 011 (sm_90) one
    mbarrier's phase j per tile, after 013 / 015 the pipelined ring: each runs and matches."""
    checks = _compiled("two_tiles_gqa", target, 3).check_passes()
    assert checks and all(ch.result.ok for ch in checks), [str(ch) for ch in checks]
    assert {ch.name for ch in checks if not ch.skipped} >= {"010_double_buffer", "015_pipeline_k_outer"}


# -- every trip count: the causal loop's start moved later, so that some blocks run 0 (or
# fewer) iterations, and each block's prologue fills fewer slots than the ring has --------

def _retile(program, fn):
    kernel = program.kernels[0]
    tile = kernel.tile()
    return dataclasses.replace(program, kernels=(replace_tile(kernel, Tile(tile.axes, fn(tile.body))),))


def _shift_start(program, by):
    return _retile(program, lambda body: tuple(
        dataclasses.replace(s, start=s.start + by) if isinstance(s, StridedLoop) and s.kind == "serial" else s
        for s in body))


def _simulate(c, kernel_ir, inputs):
    env = dict(c.values)
    env.update(c._bind(inputs))
    return [np.asarray(x) for x in c._execute("sim", env, kernel_ir)]


@pytest.mark.parametrize("by", [0, 1, 2])
@pytest.mark.parametrize("copy", ["async", "tma"])
def test_ring_is_one_buffer_for_every_trip_count(copy, by):
    """Three slots: blocks of 0 (or fewer), 1, 2, ... iterations; each result bit-identical to
    the single-buffered kernel's (same arithmetic, only the copies differ). cp.async on
    sm_80, the TMA / mbarrier ring on sm_90."""
    name = "t70_partial_tile_gqa"
    target = TARGET_OF[copy]
    ring, single = _compiled(name, target, 3), _compiled(name, target, 3, ring=False)
    tile_ring, tile_single = _shift_start(ring.tile_ir, by), _shift_start(single.tile_ir, by)
    stages = [s for s in _key_loop_of(tile_ring).body if isinstance(s, Stage)]
    assert stages and all(s.copy == copy for s in stages), stages
    kir = lower_tiles(tile_ring, ring._ctx)
    loop = _key_for(kir)
    if copy == "tma":       # consumers wait full[j % 3], the producer empty[(j + 2) % 3]
        assert {w.name for w in nodes(loop.body, MbarrierWait)} == {"a3r_full", "a3r_empty"}
    else:
        assert CpAsyncWait(1) in loop.body
    inputs = _inputs(name)
    got = _simulate(ring, kir, inputs)
    want = _simulate(single, lower_tiles(tile_single, single._ctx), inputs)
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(got, want))
    if by:      # the first query tile's block ran no key tile: 0 / 0
        assert np.isnan(got[0]).any()


def _key_loop_of(program):
    return next(s for s in program.kernels[0].tile().body if getattr(s, "kind", "") == "serial")


# -- the simulator catches a broken protocol of the variable-trip ring -------------------------

def _rewrite(body, fn):
    out = []
    for s in body:
        if isinstance(s, K.For):
            s = dataclasses.replace(s, body=_rewrite(s.body, fn))
        elif isinstance(s, K.If):
            s = dataclasses.replace(s, then=_rewrite(s.then, fn), orelse=_rewrite(s.orelse, fn))
        out += fn(s)
    return tuple(out)


def _mutated(kir, fn):
    (f,) = kir.kernels
    return dataclasses.replace(kir, kernels=(dataclasses.replace(f, body=_rewrite(f.body, fn)),))


def _key_for(kir):
    return next(s for s in nodes(kir.kernels[0].body, K.For) if s.var == "a3r")


def _ring_kernel(copy):
    c = _compiled("t70_partial_tile_gqa", TARGET_OF[copy], 3)
    return c, c.kernel_ir


def _caught(c, kir):
    with pytest.raises(SimulationError) as e:
        _simulate(c, kir, _inputs("t70_partial_tile_gqa"))
    return str(e.value)


def test_a_missing_cp_async_wait_is_caught():
    c, kir = _ring_kernel("async")
    assert _simulate(c, kir, _inputs("t70_partial_tile_gqa"))          # the ring as lowered runs
    waits = [w for w in _key_for(kir).body if isinstance(w, CpAsyncWait)]
    assert waits == [CpAsyncWait(1)]
    broken = _mutated(kir, lambda s: [] if isinstance(s, CpAsyncWait) else [s])
    assert "before its data lands" in _caught(c, broken)


def test_an_uncounted_prologue_group_is_caught():
    """The prologue commits a cp.async group for every tile, even one a block with fewer
    trips does not issue; committed only where issued, wait_group 1 lets the block's one
    tile stay in flight while it is read."""
    c, kir = _ring_kernel("async")
    pro = next(s for s in nodes(kir.kernels[0].body, K.For) if s.var == "a3r_pre")
    assert isinstance(pro.body[0], K.If) and pro.body[1] == CpAsyncCommit()

    def commit_inside(s):
        if isinstance(s, K.For) and s.var == "a3r_pre":
            guard = s.body[0]
            return [dataclasses.replace(s, body=(dataclasses.replace(guard, then=guard.then + (CpAsyncCommit(),)),))]
        return [s]
    assert "before its data lands" in _caught(c, _mutated(kir, commit_inside))


def test_a_phase_counted_from_zero_instead_of_the_start_is_caught():
    """The TMA ring's waits count iterations from the block's start (j = a3r - start): a
    phase of a3r / 3 (the loop variable, as for a loop from tile 0) waits for the wrong
    parity in a block whose start is 3 .. 5."""
    c, kir = _ring_kernel("tma")
    assert _simulate(c, kir, _inputs("t70_partial_tile_gqa"))
    loop = _key_for(kir)
    full = [w for w in nodes(loop.body, MbarrierWait) if w.name.endswith("_full")]
    assert full, str(kir)

    def from_zero(s):
        if isinstance(s, MbarrierWait) and s.name.endswith("_full"):
            return [dataclasses.replace(s, phase=K.Binary("/", K.Var("a3r"), K.Const(3, "int")))]
        return [s]
    assert "parity" in _caught(c, _mutated(kir, from_zero))


def test_a_missing_full_wait_is_caught():
    c, kir = _ring_kernel("tma")
    broken = _mutated(kir, lambda s: [] if isinstance(s, MbarrierWait) and s.name.endswith("_full") else [s])
    assert "before its data lands" in _caught(c, broken)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
def test_causal_ring_cuda_compiles(target):
    c = _compiled("three_tiles_hd128_lanes", target, 3)
    src = str(c.cuda)
    assert "prologue: issue the first 2 K tiles from a3r = -a1b + 2" in src and "steady state: issue K tile" in src
    stats = c.nvcc().stats
    assert all(s.registers > 0 and s.spills == 0 for s in stats.values()), stats


def _hf_repeat_kv(x, n_rep):
    """transformers' repeat_kv: K/V heads repeated by an expand and a reshape."""
    b, kv, s, d = x.shape
    return x[:, :, None, :, :].expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d)


def test_kv_through_expand_and_reshape_is_gqa_flash_with_the_ring():
    """The expand + reshape reads k at (h * S * D + s * D + d) // (n_rep * S * D): simplified
    to h // n_rep (ir/index.py), it is a GQA group of 4 query heads per block."""
    def attn(q, k, v):
        return F.scaled_dot_product_attention(q, _hf_repeat_kv(k, 4), _hf_repeat_kv(v, 4), is_causal=True)
    inputs = (_r(1, 8, 40, 32), _r(1, 2, 40, 32), _r(1, 2, 40, 32))
    c = deplokit.compile(attn, *inputs, config={**FLASH, "010_double_buffer.stages": 3})
    (k,) = c.loop_ir.kernels
    # the group of 4 found; the grid fill then gives each head its blocks (kv_group 4, group 1)
    assert k.flash is not None and (k.flash.kv_group or k.flash.group) == 4, str(c.loop_ir)
    assert "load k[0, a0 // 4, " in str(c.loop_ir)
    assert all(s.buffers == 3 for s in _key_loop(c).body if isinstance(s, Stage))
    res = c.check(backend="sim", rtol=1e-4, atol=1e-5)
    assert res.ok, str(res)
