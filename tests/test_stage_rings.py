"""Stage rings of 2 to 4 buffers (010's `stages`, 015's prefetch distance stages - 1), their
cp.async groups and TMA full/empty mbarriers with phase bits, dynamic shared memory above the
48 KiB a block declares statically, and the simulator's checks of the mbarrier protocol
(kernels whose protocol is broken on purpose must fail; the generated ones pass)."""
import dataclasses

import numpy as np
import pytest
import torch
from stage_helpers import nodes, stages, step

import deplokit
from deplokit.ir import kernel_ir as K
from deplokit.ir.kernel_cp_async import CpAsyncCommit, CpAsyncWait
from deplokit.ir.kernel_tma import MbarrierArrive, MbarrierInit, MbarrierWait, ProxyFence, TmaLoad, TmaTensorLoad
from deplokit.ir.tile_ir import Stage, walk
from deplokit.ir.types import ctype_bytes
from deplokit.runtime.launch_plan import build_plan
from deplokit.runtime.nvcc import compile_cuda, nvcc_available
from deplokit.runtime.sim import SimulationError
from deplokit.runtime.sim.launch import simulate_kernel
from deplokit.target import get_target


def matmul(m, k, n, target, **config):
    torch.manual_seed(0)
    cfg = {f"010_double_buffer.{a}" if a == "stages" else a.replace("__", "."): v for a, v in config.items()}
    return deplokit.compile(torch.matmul, torch.randn(m, k), torch.randn(k, n), target=target, config=cfg)


def k_loop(kernel):
    return next(s for s in nodes(kernel.body, K.For) if any(isinstance(c, K.For) for c in s.body)
                and any(isinstance(c, (MbarrierWait, CpAsyncWait)) for c in s.body))


def edit(body, fn):
    """body with fn(stmt) -> list of statements applied to every statement, depth first."""
    out = []
    for s in body:
        if isinstance(s, K.For):
            s = dataclasses.replace(s, body=edit(s.body, fn))
        elif isinstance(s, K.If):
            s = dataclasses.replace(s, then=edit(s.then, fn), orelse=edit(s.orelse, fn))
        out += fn(s)
    return tuple(out)


# -- 010 stages / 015 prefetch ---------------------------------------------------------------


def test_stages_knob_makes_a_ring_and_015_prefetches_stages_minus_one():
    c = matmul(64, 256, 64, "sm_80", stages=3, **{"002_chunk_matmul_k__k_chunk": 16})
    ring = [s for s in stages(c) if s.buffers > 1]
    assert ring and {(s.buffers, s.prefetch) for s in ring} == {(3, 2)}
    assert ", stages=3" in str(step(c, "010_double_buffer").after)
    assert ", prefetch=2" in str(step(c, "015_pipeline_k_outer").after)
    kernel = c.kernel_ir.kernels[0]
    loop = k_loop(kernel)
    # iteration ko waits for tile ko with the newest group (tile ko + 1) still in flight
    assert [w.pending for w in nodes(loop.body, CpAsyncWait)] == [1]
    guard = next(s for s in loop.body if isinstance(s, K.If))
    assert K.format_expr(guard.cond).startswith(f"(({loop.var} + 2) <")
    # the group is committed every iteration, outside the guard, so wait_group 1 counts alike
    assert any(isinstance(s, CpAsyncCommit) for s in loop.body)
    assert not list(nodes(guard.then, CpAsyncCommit))
    # the prologue issues tiles 0 and 1, one group each, in a loop of their own (unrolled)
    pro = next(s for s in kernel.body if isinstance(s, K.For) and s.var == f"{loop.var}_pre")
    assert K.format_expr(pro.stop) == "2" and pro.unroll
    assert isinstance(pro.body[-1], CpAsyncCommit) and len(list(nodes(pro.body, CpAsyncCommit))) == 1
    # the loads read slot ko % 3
    assert f"(({loop.var} % 3) * " in str(kernel)
    assert c.check(backend="sim").ok


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_every_ring_size_matches_torch_on_every_target(target, n):
    c = matmul(48, 160, 40, target, stages=n, **{"002_chunk_matmul_k__k_chunk": 16})
    assert {s.buffers for s in stages(c) if s.buffers > 1} == {n}
    assert c.check(backend="sim").ok
    if nvcc_available():
        compile_cuda(str(c.cuda), target)


def test_ring_never_longer_than_the_k_loop():
    c = matmul(32, 32, 32, "sm_80", stages=4, **{"002_chunk_matmul_k__k_chunk": 16})     # 2 K tiles
    st = step(c, "010_double_buffer")
    assert {s.buffers for s in stages(c) if s.buffers > 1} == {2}
    assert any("the loop runs 2 times" in n for n in st.remarks)
    assert c.check(backend="sim").ok


def test_default_stages_follow_the_k_loop_and_the_shared_memory():
    # a long K loop: a deep ring; a short one: two buffers
    long = matmul(64, 2048, 64, "sm_90", **{"002_chunk_matmul_k__k_chunk": 16, "003_split_matmul_k__splits": 1})
    assert {s.buffers for s in stages(long) if s.buffers > 1} == {4}
    short = matmul(64, 64, 64, "sm_90", **{"002_chunk_matmul_k__k_chunk": 16})
    assert {s.buffers for s in stages(short) if s.buffers > 1} == {2}


# -- TMA: full / empty mbarrier rings ----------------------------------------------------------

def tma_ring(n=3):
    # x (16 rows of 16 floats) and w are one tensor-map box each; every head stage TMA: an mbarrier ring
    c = matmul(16, 128, 16, "sm_90", stages=n, **{"002_chunk_matmul_k__k_chunk": 16,
                                                  "008_register_tile__tm": 1, "008_register_tile__tn": 1})
    assert {s.copy for s in stages(c)} == {"tma"}
    return c


def test_tma_ring_waits_full_with_parity_and_releases_empty():
    c = tma_ring(3)
    kernel = c.kernel_ir.kernels[0]
    inits = {i.name: (i.count, i.slots) for i in nodes(kernel.body, MbarrierInit)}
    loop = k_loop(kernel)
    ko = loop.var
    assert inits == {f"{ko}_full": (1, 3), f"{ko}_empty": (kernel.threads, 3)}
    waits = {w.name: (K.format_expr(w.slot), K.format_expr(w.phase)) for w in nodes(loop.body, MbarrierWait)}
    assert waits[f"{ko}_full"] == (f"({ko} % 3)", f"({ko} / 3)")                    # parity (ko / 3) & 1
    assert waits[f"{ko}_empty"] == (f"(({ko} + 2) % 3)", f"((({ko} + 2) / 3) + 1)")  # the slot's last reads
    assert not list(nodes(loop.body, K.Barrier))                                     # no block-wide barrier
    release = loop.body[-1]
    assert isinstance(release, MbarrierArrive) and release.name == f"{ko}_empty" and not release.expect_tx
    # the producer announces the bytes of every copy into the slot once; the copies complete them
    arrive = next(a for a in nodes(loop.body, MbarrierArrive) if a.expect_tx)
    copies = [t for t in nodes(loop.body, TmaTensorLoad)]       # one tensor-map box per operand
    assert len(copies) == 2
    assert all(t.barrier == f"{ko}_full" and not t.expect for t in copies)
    cuda = str(c.cuda)
    assert "mbarrier.arrive.expect_tx.shared.b64" in cuda and "mbarrier.try_wait.parity" in cuda
    assert "mbarrier.arrive.shared.b64 _, [%0];" in cuda
    assert arrive.slot == copies[0].slot
    assert c.check(backend="sim").ok


def test_slot_barrier_is_the_seam_the_copies_name():
    from deplokit.passes.tma.mbarrier_ring import SlotBarrier
    bar = SlotBarrier("ko_full", K.Var("s"), 1024)
    assert bar.arrive() == MbarrierArrive("ko_full", K.Var("s"), 1024)


# -- the simulator runs the protocol: broken ones fail -----------------------------------------

def sim(kernel, c):
    x, w = (np.asarray(v, dtype=np.float32) for v in c.example_inputs)
    bufs = {p.name: np.zeros(p.size, dtype=np.int32 if p.ctype == "int32" else np.float32) for p in kernel.params}
    ins = [p.name for p in kernel.params if p.const]
    bufs[ins[0]], bufs[ins[1]] = x.reshape(-1), w.reshape(-1)
    simulate_kernel(kernel, bufs)
    return bufs


def broken(c, fn):
    kernel = c.kernel_ir.kernels[0]
    return dataclasses.replace(kernel, body=edit(kernel.body, fn))


def test_generated_ring_passes_the_protocol_checks():
    c = tma_ring(3)
    sim(c.kernel_ir.kernels[0], c)


def test_waiting_on_the_wrong_phase_deadlocks():
    c = tma_ring(3)

    def wrong_parity(s):
        if isinstance(s, MbarrierWait) and s.name.endswith("_full"):
            return [dataclasses.replace(s, phase=K.Binary("+", s.phase, K.Const(1, "int")))]
        return [s]
    with pytest.raises(SimulationError, match=r"waits for phase parity 1 .*never completes"):
        sim(broken(c, wrong_parity), c)


def test_a_missing_arrive_deadlocks_the_producer():
    c = tma_ring(3)
    no_release = broken(c, lambda s: [] if isinstance(s, MbarrierArrive) and not s.expect_tx else [s])
    with pytest.raises(SimulationError, match=r"_empty\[0\] waits for phase parity 0 .*0 of \d+ arrivals"):
        sim(no_release, c)


def test_missing_bytes_never_complete_the_full_barrier():
    c = tma_ring(3)

    def overstate(s):
        if isinstance(s, MbarrierArrive) and s.expect_tx:
            return [dataclasses.replace(s, expect_tx=s.expect_tx + 16)]
        return [s]
    with pytest.raises(SimulationError, match=r"_full\[0\] .*16 transaction bytes outstanding"):
        sim(broken(c, overstate), c)


def test_reading_a_slot_whose_copy_has_not_completed():
    c = tma_ring(3)

    def wrong_slot(s):             # consumers wait on the next slot's barrier, read their own
        if isinstance(s, MbarrierWait) and s.name.endswith("_full"):
            nxt = K.Binary("%", K.Binary("+", s.slot.a, K.Const(1, "int")), s.slot.b)
            return [dataclasses.replace(s, slot=nxt)]
        return [s]
    with pytest.raises(SimulationError, match=r"before its data lands: written by a TmaLoad not yet completed"):
        sim(broken(c, wrong_slot), c)


def test_a_copy_overwriting_a_slot_still_being_read():
    c = tma_ring(2)

    def no_empty_wait(s):          # the producer refills a slot without waiting for its readers
        return [] if isinstance(s, MbarrierWait) and s.name.endswith("_empty") else [s]

    with pytest.raises(
        SimulationError, match=r"overwrites element \d+ of shared array \w+, read by .*still being read"
    ):
        sim(broken(c, no_empty_wait), c)


def test_cp_async_ring_waiting_for_too_few_groups_reads_unlanded_data():
    c = matmul(64, 256, 64, "sm_80", stages=3, **{"002_chunk_matmul_k__k_chunk": 16})
    kernel = c.kernel_ir.kernels[0]
    lazy = dataclasses.replace(kernel, body=edit(kernel.body, lambda s: [CpAsyncWait(2)]
                                                 if isinstance(s, CpAsyncWait) else [s]))
    with pytest.raises(SimulationError, match=r"before its data lands: written by cp.async group"):
        simulate_kernel(lazy, {p.name: np.zeros(p.size, dtype=np.int32 if p.ctype == "int32" else np.float32)
                               for p in lazy.params})


# -- dynamic shared memory --------------------------------------------------------------------

def deep_ring(target="sm_90", n=3):
    # 64 x 32 and 32 x 64 floats per stage (16 KiB): three of them need more than 48 KiB
    return matmul(64, 256, 64, target, stages=n, **{"002_chunk_matmul_k__k_chunk": 32})


def test_a_ring_above_48k_lives_in_dynamic_shared_memory():
    c = deep_ring(n=4)          # 4 x 16 KiB (tensor-map boxes are never padded: 3 are exactly 48 KiB)
    kernel = c.kernel_ir.kernels[0]
    arrays = [s for s in nodes(kernel.body, K.SharedArray)]
    assert kernel.dynamic_smem >= sum(ctype_bytes(a.ctype) * a.size for a in arrays) > 48 * 1024
    assert all(a.offset is not None and a.offset % a.align == 0 for a in arrays)
    assert K.declared_smem_bytes(kernel) <= 48 * 1024
    assert f"# dynamic shared memory: {kernel.dynamic_smem} bytes" in str(kernel)
    cuda = str(c.cuda)
    assert "extern __shared__ __align__(1024) unsigned char dyn_smem[];" in cuda
    for a in arrays:
        ctype = {"float": "float", "int": "int", "int32": "int"}[a.ctype]
        assert f"{ctype}* const {a.name} = reinterpret_cast<{ctype}*>(dyn_smem + {a.offset});" in cuda
    plan = build_plan(c.kernel_ir, c.input_names, c.target)
    (launch,) = [ln for ln in plan.launches if ln.name == kernel.name]
    assert launch.dynamic_smem == kernel.dynamic_smem
    assert f", {kernel.dynamic_smem}>>>" in plan.describe()
    assert c.check(backend="sim").ok


def test_under_48k_stays_static():
    c = deep_ring(n=2)
    kernel = c.kernel_ir.kernels[0]
    assert kernel.dynamic_smem == 0
    assert all(a.offset is None for a in nodes(kernel.body, K.SharedArray))
    assert "extern __shared__" not in str(c.cuda)


def test_the_simulator_honours_the_dynamic_limit():
    c = deep_ring()
    kernel = c.kernel_ir.kernels[0]
    bufs = {p.name: np.zeros(p.size, dtype=np.int32 if p.ctype == "int32" else np.float32) for p in kernel.params}
    simulate_kernel(kernel, bufs, max_smem_per_block=get_target("sm_90").dynamic_smem_per_block)
    with pytest.raises(SimulationError, match=r"bytes of shared memory .*the target allows 49152 per block"):
        simulate_kernel(kernel, bufs, max_smem_per_block=48 * 1024)
    small = dataclasses.replace(kernel, dynamic_smem=1024)
    with pytest.raises(SimulationError, match=r"reach past the 1024 bytes of dynamic shared memory"):
        simulate_kernel(small, bufs)


def test_a_ring_too_large_for_the_target_keeps_fewer_stages():
    # sm_120 (99 KiB per block): 4 stages of 32 KiB do not fit, 3 do
    c = matmul(128, 1024, 256, "sm_120", stages=4, **{"002_chunk_matmul_k__k_chunk": 64,
                                                      "003_split_matmul_k__splits": 1})
    st = step(c, "010_double_buffer")
    assert {s.buffers for s in stages(c) if s.buffers > 1} == {3}
    assert any("3 stages, not 4" in n and "more than the 100352" in n for n in st.remarks)
    assert c.kernel_ir.kernels[0].dynamic_smem == 3 * 32 * 1024


@pytest.mark.skipif(not nvcc_available(), reason="nvcc is not installed")
@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
def test_dynamic_ring_compiles_with_nvcc(target):
    c = deep_ring(target, n=4)
    assert c.kernel_ir.kernels[0].dynamic_smem > 48 * 1024
    compile_cuda(str(c.cuda), target)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc is not installed")
@pytest.mark.parametrize("n", [2, 3, 4])
def test_tma_ring_compiles_with_nvcc(n):
    compile_cuda(str(tma_ring(n).cuda), "sm_90")


# -- proxy fences -------------------------------------------------------------------------------

def _zero_then_tma(fenced):
    """Every thread zero-fills the tile with ordinary stores, then thread 0 refills it by TMA."""
    tid, zero = K.Special("tid.x"), K.Const(0, "int")
    first = K.Binary("==", tid, zero)
    body = (K.SharedArray("tile", 64),
            K.If(first, (MbarrierInit("bar", 1),)),
            K.SharedStore("tile", tid, K.Const(0.0)),
            K.Barrier(),
            K.If(first, (TmaLoad("tile", zero, "x", zero, 64, "bar"),)),
            MbarrierWait("bar", zero),
            K.GlobalStore("out", tid, K.SharedLoad("tile", tid)))
    k = K.KernelFunc("zero_then_tma", (K.Param("x"), K.Param("out", const=False)), (1, 1, 1), (64, 1, 1), body)
    if fenced:
        from deplokit.passes.tma.proxy_fence import fence_generic_stores
        k = fence_generic_stores(k)
    return k


def test_ordinary_stores_before_an_async_copy_need_a_proxy_fence():
    x = np.arange(64, dtype=np.float32)
    with pytest.raises(SimulationError, match=r"ordinary store not followed by fence.proxy.async"):
        simulate_kernel(_zero_then_tma(False), {"x": x, "out": np.zeros(64, np.float32)})
    k = _zero_then_tma(True)
    store = next(i for i, s in enumerate(k.body) if isinstance(s, K.SharedStore))
    assert isinstance(k.body[store + 1], ProxyFence)              # each storing thread fences
    out = np.zeros(64, np.float32)
    simulate_kernel(k, {"x": x, "out": out})
    assert (out == x).all()
    from deplokit.passes.lower.cuda import render_kernel
    assert "fence.proxy.async.shared::cta;" in render_kernel(k, 90)
    # the rings' slots are written by TMA alone: no fence in a generated kernel
    assert not list(nodes(tma_ring(3).kernel_ir.kernels[0].body, ProxyFence))


def test_stages_are_in_the_tuners_space():
    import random

    from deplokit.tune.space import KernelSpace
    c = matmul(64, 512, 64, "sm_90", **{"002_chunk_matmul_k__k_chunk": 16})
    name = next(k.name for k in c.loop_ir.kernels if "reduce" not in k.name)
    space = KernelSpace(c.loop_ir, name, c.target, fixed={"002_chunk_matmul_k.k_chunk": 16,
                                                          "003_split_matmul_k.splits": 1})
    assert dict(space.default_leaf().config)["010_double_buffer.stages"] == 4
    seen = set()
    rng = random.Random(0)
    for _ in range(60):
        _, leaf = space.random_leaf(rng)
        cfg = dict(leaf.config)
        rings = {s.buffers for s, _ in walk(leaf.kernel.tile().body) if isinstance(s, Stage) and s.buffers > 1}
        if "010_double_buffer.stages" in cfg and rings:
            assert rings == {cfg["010_double_buffer.stages"]}
            seen.add(cfg["010_double_buffer.stages"])
    assert seen == {2, 3, 4}


def test_the_launch_plan_refuses_more_than_the_target_allows():
    from deplokit.errors import LaunchPlanError
    from deplokit.runtime.launch_plan import check_launch
    c = deep_ring(n=4)
    kernel = c.kernel_ir.kernels[0]
    check_launch(kernel, c.target)
    small = dataclasses.replace(get_target("sm_90"), dynamic_smem_per_block=kernel.dynamic_smem - 16)
    with pytest.raises(LaunchPlanError, match=rf"{kernel.dynamic_smem} dynamic\); sm_90 allows"):
        check_launch(kernel, small)
