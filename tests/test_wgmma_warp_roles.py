"""015's producer/consumer (warp-specialised) schedule of a wgmma kernel
(`015_pipeline_k_outer.warp_specialize`, ir/warp_roles.py, passes/wgmma/warp_roles.py): a
producer warpgroup past the computing threads fills the TMA ring, waiting on each slot's
empty mbarrier; the consumers wait on the full ones, multiply with wgmma and release the
slots, optionally with one wgmma group left in flight across K tiles (wait_group 1, the
slot released one tile later). The simulator runs the two roles concurrently (interleaved at
their mbarrier waits) and retires a wgmma group only at the wait_group that retires it, so
a missing empty wait or an early release fails; nvcc compiles it for sm_90a."""
import dataclasses
import re

import numpy as np
import pytest
import torch
from kernel_plant import plant

import deplokit
from deplokit.ir import kernel_ir as K
from deplokit.ir.kernel_tma import MbarrierArrive, MbarrierInit, MbarrierWait
from deplokit.ir.kernel_wgmma import WgmmaWait
from deplokit.ir.tile_ir import AsyncWait, walk
from deplokit.precision import unit_roundoff
from deplokit.runtime.nvcc import compile_cuda, nvcc_available
from deplokit.runtime.sass import sass_available
from deplokit.runtime.sim import SimulationError, simulate_program

WS = "015_pipeline_k_outer.warp_specialize"
FLIGHT = "015_pipeline_k_outer.wgmma_in_flight"


def _operands(m, k, n, dtype, seed=0):
    torch.manual_seed(seed)
    return torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)


def _compile(a, b, in_flight=1, target="sm_90", **more):
    return deplokit.compile(lambda a, b: a @ b, a, b, target=target, config={WS: True, FLIGHT: in_flight, **more})


def _close_to_exact(got, a, b):
    exact = a.double().numpy() @ b.double().numpy()
    scale = np.abs(a.double().numpy()) @ np.abs(b.double().numpy())
    name = "bfloat16" if a.dtype == torch.bfloat16 else "float16"
    tol = unit_roundoff(name) * np.abs(exact) + a.shape[1] * 2.0 ** -24 * scale
    assert (np.abs(got.double().numpy() - exact) <= tol).all()


def _roles_if(kernel):
    (split,) = [s for s in K.walk_stmts(kernel.body) if isinstance(s, K.If) and s.roles]
    return split


@pytest.mark.parametrize("dtype,in_flight", [(torch.bfloat16, 1), (torch.float16, 0)])
def test_producer_warpgroup_fills_the_ring_and_matches_eager(dtype, in_flight):
    """M = 200, K = 320, N = 72: partial boxes, five K tiles through the ring."""
    a, b = _operands(200, 320, 72, dtype, seed=4)
    c = _compile(a, b, in_flight)
    kern = c.tile_ir.kernels[0]
    assert kern.mma.wgmma
    (wait,) = [s for s, _ in walk(kern.tile().body) if isinstance(s, AsyncWait)]
    assert wait.roles is not None and wait.roles.in_flight == in_flight
    assert "producer warpgroup of 128 threads issues the copies" in str(c.tile_ir)
    kir = c.kernel_ir.kernels[0]
    consumers = kern.mma.warps[0] * 32
    assert kir.block == (consumers + 128, 1, 1)
    split = _roles_if(kir)
    # the producer's elected thread is its warpgroup's first; only it copies and waits on empty
    producer = list(K.walk_stmts(split.then))
    elected = [s for s in producer if isinstance(s, K.If) and s.elect]
    assert elected and all(s.cond.b == K.Const(consumers, "int") for s in elected)
    assert {s.name.split("_")[-1] for s in producer if isinstance(s, MbarrierWait)} == {"empty"}
    consumer = list(K.walk_stmts(split.orelse))
    assert {s.name.split("_")[-1] for s in consumer if isinstance(s, MbarrierWait)} == {"full"}
    assert [s.pending for s in consumer if isinstance(s, WgmmaWait)] == ([1, 0] if in_flight else [0])
    (empty,) = [s for s in kir.body if isinstance(s, MbarrierInit) and s.name.endswith("_empty")]
    assert empty.count == consumers
    text = str(c.kernel_ir)
    assert "# producer warpgroup" in text and "# consumers" in text
    _close_to_exact(c.run(a, b, backend="sim"), a, b)
    assert c.check(backend="sim").passed


@pytest.mark.parametrize("in_flight", [0, 1])
def test_a_ring_of_four_slots_wraps_around(in_flight):
    """Ten K tiles through four slots: the producer's prologue loop fills slots 0..2, every
    slot is refilled twice (its empty barrier's phases 0 and 1)."""
    a, b = _operands(136, 640, 64, torch.bfloat16, seed=1)
    c = _compile(a, b, in_flight, **{"010_double_buffer.stages": 4, "003_split_matmul_k.splits": 1})
    assert "stages=4" in str(c.tile_ir) and not _roles_if_absent(c)
    _close_to_exact(c.run(a, b, backend="sim"), a, b)


def test_the_knob_is_in_the_tuners_space_for_wgmma_kernels_only():
    from deplokit.passes.schedule.t015_pipeline_k_outer import PASS

    knobs = {k.name: k for k in PASS.knobs}
    a, b = _operands(128, 256, 64, torch.bfloat16)
    c = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_90")
    assert _roles_if_absent(c)                      # off by default
    kern = c.tile_ir.kernels[0]
    assert knobs["warp_specialize"].search_domain(kern, c.target) == (False, True)
    assert knobs["wgmma_in_flight"].search_domain(kern, c.target) == (0, 1)
    # mma.sync (sm_80): no such schedule to search; asked for, 015 says why it does not apply
    c80 = deplokit.compile(lambda a, b: a @ b, a, b, target="sm_80")
    assert knobs["warp_specialize"].search_domain(c80.tile_ir.kernels[0], c80.target) == (False,)
    asked = _compile(a, b, target="sm_80")
    assert _roles_if_absent(asked)
    notes = [r for st in asked.trace if st.name == "015_pipeline_k_outer" for r in st.remarks]
    assert any("warp_specialize: the kernel does not multiply with wgmma" in r for r in notes)
    # split-K reduced by the kernel's last block: its barriers would hang the producer (the
    # split asked for: no grid of this 128 x 64 output balances, and the plan takes none)
    a, b = _operands(128, 512, 64, torch.bfloat16, seed=2)
    split = _compile(a, b, **{"003_split_matmul_k.splits": 2, "003_split_matmul_k.reduce": "in_kernel"})
    assert split.tile_ir.kernels[0].split_k is not None and _roles_if_absent(split)
    notes = [r for st in split.trace if st.name == "015_pipeline_k_outer" for r in st.remarks]
    assert any("split-K reduced in the kernel" in r for r in notes)
    _close_to_exact(split.run(a, b, backend="sim"), a, b)


def _roles_if_absent(c) -> bool:
    return not any(isinstance(s, K.If) and s.roles for k in c.kernel_ir.kernels for s in K.walk_stmts(k.body))


def _no_empty_wait(s):
    return None if isinstance(s, MbarrierWait) and s.name.endswith("_empty") else s


def _release_at_once(s):
    """Release slot ko % N right after wait_group 1, while the wgmma reading it may still run."""
    if isinstance(s, K.If) and len(s.then) == 2 and isinstance(s.then[1], MbarrierArrive):
        arrive = s.then[1]
        return dataclasses.replace(arrive, slot=K.Binary("%", K.Var("a2o"), arrive.slot.b))
    return s


@pytest.mark.parametrize("in_flight,change", [(0, _no_empty_wait), (1, _release_at_once)])
def test_a_planted_early_refill_fails_the_simulator(in_flight, change):
    """The producer refills a slot the consumers' wgmma has not finished reading: the
    simulator (producer run as early as it may; wgmma reading at its wait_group) reads the
    refilled slot, or catches the read before the refill's data lands."""
    a, b = _operands(128, 512, 64, torch.bfloat16, seed=2)
    c = _compile(a, b, in_flight, **{"003_split_matmul_k.splits": 1})
    assert c.tile_ir.kernels[0].split_k is None
    k = c.kernel_ir.kernels[0]
    env = {"a": a.float().numpy(), "b": b.float().numpy()}
    exact = a.double().numpy() @ b.double().numpy()
    (right,) = simulate_program(c.kernel_ir, env)
    assert np.allclose(right, exact, rtol=1e-2, atol=0.5)
    wrong = dataclasses.replace(k, body=tuple(plant(k.body, change)))
    assert wrong != k
    try:
        (got,) = simulate_program(dataclasses.replace(c.kernel_ir, kernels=(wrong,)), env)
    except SimulationError as e:
        assert "before its data lands" in str(e) or "overwrites" in str(e), str(e)
        return
    assert not np.allclose(got, exact, atol=0.5)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
def test_warp_specialised_kernel_compiles_for_sm_90a():
    a, b = _operands(256, 256, 128, torch.bfloat16)
    c = _compile(a, b)
    source = c.cuda
    assert source.build_arch("sm_90") == "sm_90a"
    text = str(source)
    warp = c.tile_ir.kernels[0].mma.warps[0]            # the consumers' warps: the producer's first is next
    assert f"threadIdx.x / 32 == {warp} && deplokit_elect_one()" in text
    assert "wgmma.wait_group.sync.aligned 1" in text
    result = compile_cuda(text, source.build_arch("sm_90"), kernel_names=source.kernels)
    assert all(s.spill_stores == 0 and s.registers > 0 for s in result.stats.values())


@pytest.mark.skipif(not sass_available(), reason="nvcc and cuobjdump/nvdisasm not installed")
def test_sass_consumer_loop_is_hgmma_and_the_producer_loop_utmaldg():
    a, b = _operands(1024, 1024, 1024, torch.bfloat16)
    c = _compile(a, b, **{"003_split_matmul_k.splits": 1})      # (split-K in the kernel keeps the ring)
    assert not _roles_if_absent(c)
    kern = c.sass().kernel(c.kernel_ir.kernels[0].name)
    main = kern.main_loop()
    assert main.mix.hgmma > 0 and main.mix.tma == 0 and main.mix.hmma == 0 and main.mix.lds == 0
    assert any(lp.mix.tma > 0 and lp.mix.hgmma == 0 for lp in kern.loops)
    assert kern.spill_stores == 0
    # setmaxnreg kept by ptxas (it drops both without an entry count): one release, one allocation
    regs = sorted(i.opcode.split(".")[1] for i in kern.instructions if i.opcode.startswith("USETMAXREG"))
    assert regs == ["DEALLOC", "TRY_ALLOC"]


def _split_kernel():
    """256 x 128 x 256: two consumer warpgroups of 64 x 256 beside the producer (384 threads;
    the 16 x 16 threads asked for: no grid of the output balances, the plan takes the cheaper
    blocks of one warpgroup)."""
    a, b = _operands(256, 128, 256, torch.bfloat16, seed=6)
    return a, b, _compile(a, b, **{"005_blockify_launch.thread_shape": "16x16"})


def test_registers_move_from_the_producer_to_the_consumers():
    """015 decides the setmaxnreg counts once (register_split) and records them on the roles;
    the producer's branch starts with setmaxnreg.dec, the consumers' with .inc, the kernel is
    bound to one resident block (ptxas then knows the count at entry), the CUDA prints them."""
    from deplokit.ir.kernel_wgmma import SetMaxNReg
    from deplokit.ir.warp_roles import entry_registers
    from deplokit.passes.wgmma.warp_roles import register_split

    a, b, c = _split_kernel()
    (wait,) = [s for s, _ in walk(c.tile_ir.kernels[0].tile().body) if isinstance(s, AsyncWait)]
    kir = c.kernel_ir.kernels[0]
    consumers = kir.block[0] - 128
    assert consumers == 256 and (wait.roles.producer_regs, wait.roles.consumer_regs) == register_split(consumers)
    assert (wait.roles.producer_regs, wait.roles.consumer_regs) == (40, 232)
    entry = entry_registers(kir.block[0])
    assert entry == 168 and 128 * 40 + consumers * 232 <= kir.block[0] * entry
    assert "setmaxnreg 40 / 232 registers" in str(c.tile_ir)
    split = _roles_if(kir)
    assert split.then[0] == SetMaxNReg(40, inc=False) and split.orelse[0] == SetMaxNReg(232, inc=True)
    assert kir.min_blocks == 1
    text = str(c.cuda)
    assert "__launch_bounds__(384, 1)" in text
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in text and "setmaxnreg.inc.sync.aligned.u32 232;" in text
    _close_to_exact(c.run(a, b, backend="sim"), a, b)
    # one consumer warpgroup: 256 threads start at 248 registers, the consumers take 256
    assert register_split(128) == (40, 256) and register_split(384) == (40, 152)


def _count(n):
    def change(s):
        from deplokit.ir.kernel_wgmma import SetMaxNReg
        return dataclasses.replace(s, count=n) if isinstance(s, SetMaxNReg) and s.inc else s
    return change


def _dec_in_the_elected_thread(s):
    """The producer's setmaxnreg.dec moved into its elected thread's branch: not the whole warpgroup."""
    from deplokit.ir.kernel_wgmma import SetMaxNReg
    if isinstance(s, K.If) and s.roles:
        dec, rest = s.then[0], list(s.then[1:])
        assert isinstance(dec, SetMaxNReg)
        at = next(i for i, x in enumerate(rest) if isinstance(x, K.If) and x.elect)
        rest[at] = dataclasses.replace(rest[at], then=(dec,) + rest[at].then)
        return dataclasses.replace(s, then=tuple(rest))
    return s


@pytest.mark.parametrize("change,error", [
    (_count(240), "more than the 384 x 168 = 64512"),          # 128 x 40 + 256 x 240 = 66560
    (_count(236), "a multiple of 8"),
    (_count(264), "a multiple of 8 in [24, 256]"),
    (_dec_in_the_elected_thread, "only some threads of a warpgroup"),
])
def test_a_planted_wrong_register_count_fails_the_simulator(change, error):
    a, b, c = _split_kernel()
    k = c.kernel_ir.kernels[0]
    wrong = dataclasses.replace(k, body=tuple(plant(k.body, change)))
    assert wrong != k
    env = {"a": a.float().numpy(), "b": b.float().numpy()}
    with pytest.raises(SimulationError, match=re.escape(error)):
        simulate_program(dataclasses.replace(c.kernel_ir, kernels=(wrong,)), env)


def test_setmaxnreg_without_an_entry_count_fails():
    """No minimum-blocks bound: ptxas cannot tell the count at entry and drops setmaxnreg."""
    a, b, c = _split_kernel()
    wrong = dataclasses.replace(c.kernel_ir.kernels[0], min_blocks=0)
    env = {"a": a.float().numpy(), "b": b.float().numpy()}
    with pytest.raises(SimulationError, match="no minimum-blocks launch bound"):
        simulate_program(dataclasses.replace(c.kernel_ir, kernels=(wrong,)), env)
