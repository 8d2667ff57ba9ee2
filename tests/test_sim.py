"""The SIMT simulator (deplokit.runtime.sim) on hand-built Kernel-IR trees: results against
numpy / torch, and every hazard it must report (races, divergent barriers, out-of-bounds,
misalignment, async copies read too early, inactive shuffle sources, conflicts)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from bench_sim import F, I, S, V, add, eq, lt, matmul_kernel, mul, rmsnorm_kernel

from deplokit.errors import DeplokitError
from deplokit.ir.kernel_cp_async import CpAsync, CpAsyncCommit, CpAsyncWait
from deplokit.ir.kernel_ir import (
    Assign,
    Barrier,
    Binary,
    Call,
    Comment,
    Declare,
    DeclareArray,
    For,
    GlobalLoad,
    GlobalStore,
    If,
    KernelFunc,
    KernelProgram,
    Param,
    RegLoad,
    Select,
    SharedArray,
    SharedLoad,
    SharedStore,
    Shuffle,
    Unary,
    VectorLoad,
    VectorStore,
)
from deplokit.ir.kernel_tma import MbarrierInit, MbarrierWait, TmaLoad
from deplokit.ir.types import Buffer, TensorType
from deplokit.runtime.sim import SimulationError, simulate_kernel, simulate_program


def _rng():
    return np.random.default_rng(0)


def _gid(threads):
    return add(mul(S("bid.x"), I(threads)), S("tid.x"))


def _pointwise(n, threads=256, guard=True):
    """out[i] = sigmoid(x[i]) * 2 - exp(x[i] / 4), one element per thread."""
    x = GlobalLoad("x", V("i"))
    store = GlobalStore("out", V("i"), Binary("-", mul(Call("sigmoid", (x,)), F(2.0)),
                                             Call("exp", (Binary("/", x, F(4.0)),))))
    body = (Declare("i", "int", _gid(threads)),
            If(lt(V("i"), I(n)), (store,)) if guard else store)
    return KernelFunc("pointwise", (Param("x", size=n), Param("out", const=False, size=n)),
                      ((n + threads - 1) // threads, 1, 1), (threads, 1, 1), body)


# -- results --------------------------------------------------------------------------------------

def test_pointwise_with_bounds_check_on_a_ragged_size():
    n = 1000
    x = _rng().standard_normal(n, dtype=np.float32)
    out = np.full(n, -7.0, np.float32)
    stats = simulate_kernel(_pointwise(n), {"x": x, "out": out})
    ref = 2 / (1 + np.exp(-x)) - np.exp(x / 4)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    assert out.dtype == np.float32
    assert stats.blocks == 4 and stats.threads == 1024
    assert stats.global_bytes_stored == 4 * n            # the 24 idle threads store nothing
    assert stats.global_bytes_loaded == 2 * 4 * n


@pytest.mark.parametrize("rows,n", [(37, 1000), (32, 2048)])
def test_rmsnorm_row_reduction(rows, n):
    rng = _rng()
    x = rng.standard_normal((rows, n), dtype=np.float32)
    w = rng.standard_normal(n, dtype=np.float32)
    out = np.zeros(rows * n, np.float32)
    stats = simulate_kernel(rmsnorm_kernel(rows, n), {"x": x.reshape(-1), "w": w, "out": out})
    ref = torch.nn.functional.rms_norm(torch.from_numpy(x), (n,), torch.from_numpy(w), eps=1e-6)
    np.testing.assert_allclose(out.reshape(rows, n), ref.numpy(), rtol=1e-4, atol=1e-5)
    assert stats.barriers == 2 * rows


@pytest.mark.parametrize("first,second", [(False, True), (True, False)])
def test_rmsnorm_without_a_barrier_is_a_race(first, second):
    rows, n = 4, 512
    x = _rng().standard_normal(rows * n, dtype=np.float32)
    bufs = {"x": x, "w": np.ones(n, np.float32), "out": np.zeros(rows * n, np.float32)}
    k = rmsnorm_kernel(rows, n, first_barrier=first, second_barrier=second)
    with pytest.raises(SimulationError, match=r"kernel rmsnorm: race on shared array red in SharedLoad"):
        simulate_kernel(k, bufs)
    simulate_kernel(k, bufs, check_races=False)           # the check can be turned off
    ref = x.reshape(rows, n) / np.sqrt((x.reshape(rows, n) ** 2).mean(1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(bufs["out"].reshape(rows, n), ref, rtol=1e-4, atol=1e-5)


def test_matmul_tiled_odd_sizes():
    m, n, k = 37, 129, 13
    rng = _rng()
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.full(m * n, np.nan, np.float32)
    kern = matmul_kernel(m, n, k)
    assert kern.grid == (9, 3, 1)                          # several blocks in y
    stats = simulate_kernel(kern, {"A": a.reshape(-1), "B": b.reshape(-1), "C": c})
    np.testing.assert_allclose(c.reshape(m, n), a @ b, rtol=1e-4, atol=1e-5)
    assert stats.barriers == 2 * 27                        # one K tile, two barriers per block


def test_matmul_in_small_chunks_matches():
    m, n, k = 40, 50, 70
    rng = _rng()
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.zeros(m * n, np.float32)
    stats = simulate_kernel(matmul_kernel(m, n, k), {"A": a.reshape(-1), "B": b.reshape(-1), "C": c},
                            max_threads_in_flight=5 * 256)
    assert stats.chunks == 3                               # 12 blocks, 5 per chunk
    np.testing.assert_allclose(c.reshape(m, n), a @ b, rtol=1e-4, atol=1e-5)


def test_matmul_without_the_second_barrier_is_a_write_after_read_race():
    m, n, k = 16, 16, 48
    bufs = {"A": np.ones(m * k, np.float32), "B": np.ones(k * n, np.float32),
            "C": np.zeros(m * n, np.float32)}
    with pytest.raises(SimulationError, match=r"race on shared array As in SharedStore.*read by"):
        simulate_kernel(matmul_kernel(m, n, k, second_barrier=False), bufs)


def test_grid_and_block_indices_in_three_dimensions():
    grid, block = (2, 3, 2), (8, 4, 2)
    threads = 64
    gid = add(mul(add(add(S("bid.x"), mul(S("bid.y"), I(2))), mul(S("bid.z"), I(6))), I(threads)),
              add(add(S("tid.x"), mul(S("tid.y"), I(8))), mul(S("tid.z"), I(32))))
    code = add(add(add(mul(S("bid.x"), I(100000)), mul(S("bid.y"), I(10000))), mul(S("bid.z"), I(1000))),
               add(mul(S("lane"), I(10)), S("warp")))
    k = KernelFunc("ids", (Param("out", "int64", const=False),), grid, block,
                   (GlobalStore("out", gid, code),))
    out = np.full(12 * threads, -1, np.int64)
    simulate_kernel(k, {"out": out})
    bz, by, bx, t = np.meshgrid(np.arange(2), np.arange(3), np.arange(2), np.arange(threads), indexing="ij")
    ref = bx * 100000 + by * 10000 + bz * 1000 + (t % 32) * 10 + t // 32
    np.testing.assert_array_equal(out, ref.reshape(-1))


def test_register_array_accumulation_uniform_and_per_thread_index():
    threads, reps = 64, 6
    x = _rng().standard_normal(reps * threads, dtype=np.float32)
    tid = S("tid.x")
    body = (
        DeclareArray("acc", 4, init=1.0),
        For("j", I(0), I(reps), I(1), (
            Declare("v", "float", GlobalLoad("x", add(mul(V("j"), I(threads)), tid))),
            Assign("acc", add(RegLoad("acc", I(0)), V("v")), index=I(0)),          # uniform index
            Assign("acc", add(RegLoad("acc", Binary("%", add(tid, V("j")), I(3))), V("v")),
                   index=add(Binary("%", add(tid, V("j")), I(3)), I(0))),        # per-thread index
        )),
        For("r", I(0), I(4), I(1), (
            GlobalStore("out", add(mul(tid, I(4)), V("r")), RegLoad("acc", V("r"))),
        )),
    )
    k = KernelFunc("regs", (Param("x"), Param("out", const=False)), (1, 1, 1), (threads, 1, 1), body)
    out = np.zeros(threads * 4, np.float32)
    simulate_kernel(k, {"x": x, "out": out})
    ref = np.ones((threads, 4), np.float32)
    xs = x.reshape(reps, threads)
    for j in range(reps):
        ref[:, 0] += xs[j]
        for t in range(threads):
            ref[t, (t + j) % 3] += xs[j, t]
    np.testing.assert_allclose(out.reshape(threads, 4), ref, rtol=1e-5)
    bad = KernelFunc("regs_oob", k.params, k.grid, k.block,
                     (DeclareArray("acc", 4), Assign("acc", F(1.0), index=add(tid, I(0)))))
    with pytest.raises(SimulationError, match=r"register array acc\[4\] indexed at 4"):
        simulate_kernel(bad, {"x": x, "out": out})


def test_divergent_loop_and_lexical_scopes():
    """A loop whose trip count differs per thread (tid + 1 iterations), an inner Declare that
    shadows an outer name and is re-declared each iteration, and an If/else under the loop's mask."""
    threads = 40
    tid = S("tid.x")
    body = (
        Declare("s", "int", I(0)),
        Declare("t", "int", I(1000)),
        For("i", I(0), add(tid, I(1)), I(1), (
            Declare("t", "int", I(0)),                          # shadows, fresh each iteration
            Assign("t", add(V("t"), V("i"))),
            If(eq(Binary("%", V("i"), I(2)), I(0)),
               (Assign("s", add(V("s"), V("t"))),),
               (Assign("s", Binary("-", V("s"), I(1))),)),
        )),
        GlobalStore("out", tid, add(mul(V("s"), I(10000)), V("t"))),   # the outer t again
    )
    k = KernelFunc("loop", (Param("out", "int64", const=False),), (1, 1, 1), (threads, 1, 1), body)
    out = np.zeros(threads, np.int64)
    simulate_kernel(k, {"out": out})
    ref = [sum(i if i % 2 == 0 else -1 for i in range(t + 1)) * 10000 + 1000 for t in range(threads)]
    np.testing.assert_array_equal(out, ref)


def test_int_and_float_semantics():
    tid = S("tid.x")
    neg = Binary("-", tid, I(5))                                 # -5 .. 2
    body = (
        GlobalStore("iout", tid, add(mul(Binary("/", neg, I(2)), I(1000)),       # C division
                                     add(mul(Binary("//", neg, I(2)), I(10)),    # floor
                                         Binary("%", neg, I(3))))),              # C remainder
        GlobalStore("fout", tid, add(Binary("/", GlobalLoad("x", tid), F(3.0)), tid)),
    )
    k = KernelFunc("arith", (Param("x"), Param("iout", "int64", const=False), Param("fout", const=False)),
                   (1, 1, 1), (8, 1, 1), body)
    x = np.linspace(-1, 1, 8).astype(np.float32)
    iout, fout = np.zeros(8, np.int64), np.zeros(8, np.float32)
    simulate_kernel(k, {"x": x, "iout": iout, "fout": fout})
    v = np.arange(8) - 5
    c_div = np.trunc(v / 2).astype(np.int64)
    np.testing.assert_array_equal(iout, c_div * 1000 + (v // 2) * 10 + np.fmod(v, 3))
    np.testing.assert_array_equal(fout, x / np.float32(3) + np.arange(8, dtype=np.float32))


def test_short_circuit_and_select_guard_loads():
    n, threads = 10, 32
    tid = S("tid.x")
    body = (GlobalStore("out", tid, Select(Binary("&&", lt(tid, I(n)), Binary(">", GlobalLoad("x", tid), F(0.0))),
                                           F(1.0), Unary("neg", F(1.0)))),)
    k = KernelFunc("guard", (Param("x", size=n), Param("out", const=False)), (1, 1, 1), (threads, 1, 1), body)
    x = np.linspace(-1, 1, n).astype(np.float32)
    out = np.zeros(threads, np.float32)
    simulate_kernel(k, {"x": x, "out": out})
    np.testing.assert_array_equal(out, np.r_[np.where(x > 0, 1, -1), -np.ones(threads - n)])


# -- hazards --------------------------------------------------------------------------------------

def test_out_of_bounds_global_store_is_reported():
    n = 1000
    bufs = {"x": np.zeros(n, np.float32), "out": np.zeros(n, np.float32)}
    with pytest.raises(SimulationError) as err:
        simulate_kernel(_pointwise(n, guard=False), bufs)
    msg = str(err.value)
    assert isinstance(err.value, DeplokitError)
    assert "kernel pointwise" in msg and "out of bounds" in msg and "offset 1000" in msg
    assert "[0, 1000)" in msg and "block (3, 0, 0) thread (232, 0, 0)" in msg


def test_barrier_in_divergent_if_is_reported():
    body = (SharedArray("s", 32), If(lt(S("lane"), I(16)), (Barrier(),)))
    k = KernelFunc("divergent", (), (2, 1, 1), (64, 1, 1), body)
    with pytest.raises(SimulationError, match=r"kernel divergent: Barrier in divergent control flow: "
                                              r"only 32 of 64 threads"):
        simulate_kernel(k, {})
    # a condition uniform over each block is fine, even if it differs between blocks
    tid = S("tid.x")
    ok = KernelFunc("uniform", (Param("out", const=False),), (3, 1, 1), (64, 1, 1), (
        SharedArray("s", 64),
        If(eq(S("bid.x"), I(1)), (
            SharedStore("s", tid, Unary("float", tid)),
            Barrier(),
            GlobalStore("out", add(I(64), tid), SharedLoad("s", Binary("^", tid, I(1))))),
           (GlobalStore("out", _gid(64), F(-1.0)),)),
    ))
    out = np.zeros(192, np.float32)
    assert simulate_kernel(ok, {"out": out}).barriers == 1
    np.testing.assert_array_equal(out.reshape(3, 64), [[-1] * 64, np.arange(64) ^ 1, [-1] * 64])


def test_shuffle_from_an_inactive_lane_is_reported():
    tid = S("tid.x")
    body = (Declare("v", "float", F(1.0)),
            If(lt(S("lane"), I(8)), (Assign("v", Shuffle(V("v"), 8)),)),
            GlobalStore("out", tid, V("v")))
    k = KernelFunc("shfl", (Param("out", const=False),), (1, 1, 1), (32, 1, 1), body)
    with pytest.raises(SimulationError, match=r"Shuffle\(xor 8\).*reads lane 8, which is inactive"):
        simulate_kernel(k, {"out": np.zeros(32, np.float32)})
    good = KernelFunc("shfl", k.params, k.grid, k.block,
                      (Declare("v", "float", Unary("float", tid)),
                       If(lt(S("lane"), I(16)), (Assign("v", Shuffle(V("v"), 8)),)),
                       GlobalStore("out", tid, V("v"))))
    out = np.zeros(32, np.float32)
    simulate_kernel(good, {"out": out})
    np.testing.assert_array_equal(out, np.r_[np.arange(16) ^ 8, np.arange(16, 32)])


def test_shared_write_write_conflict_is_reported_or_resolved_deterministically():
    tid = S("tid.x")
    body = (SharedArray("s", 4),
            SharedStore("s", Binary("%", tid, I(4)), Unary("float", tid)),
            Barrier(),
            GlobalStore("out", _gid(16), SharedLoad("s", Binary("%", tid, I(4)))))
    k = KernelFunc("conflict", (Param("out", const=False),), (2, 1, 1), (16, 1, 1), body)
    out = np.zeros(32, np.float32)
    with pytest.raises(SimulationError, match=r"kernel conflict: SharedStore write-write conflict on "
                                              r"shared array s"):
        simulate_kernel(k, {"out": out})
    simulate_kernel(k, {"out": out}, check_races=False)
    np.testing.assert_array_equal(out, np.tile(12 + np.arange(16) % 4, 2))   # highest thread wins


def test_global_write_write_conflict_needs_different_values():
    tid = S("tid.x")
    same = KernelFunc("same", (Param("out", const=False),), (2, 1, 1), (32, 1, 1),
                      (GlobalStore("out", I(0), F(3.0)),))
    out = np.zeros(1, np.float32)
    simulate_kernel(same, {"out": out})
    assert out[0] == 3.0
    diff = KernelFunc("diff", same.params, same.grid, same.block,
                      (GlobalStore("out", Binary("//", tid, I(2)), Unary("float", tid)),))
    out = np.zeros(16, np.float32)
    with pytest.raises(SimulationError, match=r"kernel diff: GlobalStore write-write conflict on buffer out"):
        simulate_kernel(diff, {"out": out})
    simulate_kernel(diff, {"out": out}, check_races=False)
    np.testing.assert_array_equal(out, 2 * np.arange(16) + 1)


def test_store_to_a_const_parameter_is_reported():
    k = KernelFunc("ro", (Param("x"),), (1, 1, 1), (32, 1, 1), (GlobalStore("x", S("tid.x"), F(0.0)),))
    with pytest.raises(SimulationError, match="read-only parameter x"):
        simulate_kernel(k, {"x": np.ones(32, np.float32)})


# -- vector accesses, cp.async, TMA ----------------------------------------------------------------

def _vector_kernel(misalign=0, space="global"):
    threads = 32
    off = add(mul(_gid(threads), I(4)), I(misalign))
    names = ("a", "b", "c", "d")
    body = [Comment("float4 round trip"), *[Declare(n, "float") for n in names]]
    if space == "global":
        body.append(VectorLoad(names, "global", "x", off))
    else:
        lo = mul(S("tid.x"), I(4))
        body += [SharedArray("s", threads * 4),
                 *[SharedStore("s", add(lo, I(j)), GlobalLoad("x", add(mul(_gid(threads), I(4)), I(j))))
                   for j in range(4)],
                 VectorLoad(names, "shared", "s", add(lo, I(misalign)))]
    body.append(VectorStore("global", "out", mul(_gid(threads), I(4)),
                            tuple(mul(V(n), F(2.0)) for n in reversed(names))))
    return KernelFunc("vec", (Param("x"), Param("out", const=False)), (2, 1, 1), (threads, 1, 1), tuple(body))


@pytest.mark.parametrize("space", ["global", "shared"])
def test_float4_vector_load_store(space):
    x = _rng().standard_normal(256, dtype=np.float32)
    out = np.zeros(256, np.float32)
    stats = simulate_kernel(_vector_kernel(space=space), {"x": x, "out": out})
    np.testing.assert_array_equal(out.reshape(-1, 4), 2 * x.reshape(-1, 4)[:, ::-1])
    assert stats.global_bytes_stored == 256 * 4


@pytest.mark.parametrize("space", ["global", "shared"])
def test_float4_misaligned_is_reported(space):
    x = np.zeros(260, np.float32)
    with pytest.raises(SimulationError, match=r"VectorLoad on .* at offset \d+: not 16-byte aligned"):
        simulate_kernel(_vector_kernel(misalign=2, space=space), {"x": x, "out": np.zeros(256, np.float32)})


def _cp_async_kernel(wait=True, early_read=False, pending=0):
    """Two tiles of 128 floats staged by cp.async (16 bytes a thread), one group each; out =
    tile0[reversed] + tile1."""
    threads = 32
    tid = S("tid.x")
    base = mul(S("bid.x"), I(256))
    body = [SharedArray("s", 256)]
    for g in range(2):
        body += [CpAsync("s", add(I(128 * g), mul(tid, I(4))), "x", add(base, add(I(128 * g), mul(tid, I(4)))), 16),
                 CpAsyncCommit()]
    if early_read:
        body.append(Declare("peek", "float", SharedLoad("s", mul(tid, I(4)))))
    if wait:
        body.append(CpAsyncWait(pending))
    body.append(Barrier())
    body.append(For("j", I(0), I(4), I(1), (
        GlobalStore("out", add(mul(S("bid.x"), I(128)), add(mul(tid, I(4)), V("j"))),
                    add(SharedLoad("s", Binary("-", I(127), add(mul(tid, I(4)), V("j")))),
                        SharedLoad("s", add(I(128), add(mul(tid, I(4)), V("j")))))),
    )))
    return KernelFunc("cp_async", (Param("x"), Param("out", const=False)), (3, 1, 1), (threads, 1, 1), tuple(body))


def test_cp_async_staging_with_commit_and_wait():
    x = _rng().standard_normal(3 * 256, dtype=np.float32)
    out = np.zeros(3 * 128, np.float32)
    simulate_kernel(_cp_async_kernel(), {"x": x, "out": out})
    xs = x.reshape(3, 2, 128)
    np.testing.assert_array_equal(out.reshape(3, 128), xs[:, 0, ::-1] + xs[:, 1])


@pytest.mark.parametrize("kw", [dict(wait=False), dict(early_read=True), dict(pending=1)])
def test_reading_cp_async_data_before_the_wait_is_reported(kw):
    x = np.zeros(3 * 256, np.float32)
    with pytest.raises(SimulationError, match=r"reads shared array s before its data lands.*cp\.async group"):
        simulate_kernel(_cp_async_kernel(**kw), {"x": x, "out": np.zeros(3 * 128, np.float32)})


def _tma_kernel(wait=True, phase=0):
    threads = 64
    tid = S("tid.x")
    body = [SharedArray("tile", 128),
            If(eq(tid, I(0)), (MbarrierInit("bar", 1),)),
            Barrier(),
            If(eq(tid, I(0)), (TmaLoad("tile", I(0), "x", mul(S("bid.x"), I(128)), 128, "bar"),))]
    if wait:
        body.append(MbarrierWait("bar", I(phase)))
    body.append(GlobalStore("out", add(mul(S("bid.x"), I(threads)), tid),
                            add(SharedLoad("tile", Binary("-", I(127), tid)), SharedLoad("tile", tid))))
    return KernelFunc("tma", (Param("x"), Param("out", const=False)), (2, 1, 1), (threads, 1, 1), tuple(body))


def test_tma_load_completes_at_the_mbarrier_wait():
    x = _rng().standard_normal(256, dtype=np.float32)
    out = np.zeros(128, np.float32)
    simulate_kernel(_tma_kernel(), {"x": x, "out": out})
    xs = x.reshape(2, 128)
    np.testing.assert_array_equal(out.reshape(2, 64), xs[:, ::-1][:, :64] + xs[:, :64])
    with pytest.raises(SimulationError, match=r"before its data lands.*TmaLoad not yet completed"):
        simulate_kernel(_tma_kernel(wait=False), {"x": x, "out": out})
    with pytest.raises(SimulationError, match=r"waits for phase parity 1"):
        simulate_kernel(_tma_kernel(phase=1), {"x": x, "out": out})


# -- programs ---------------------------------------------------------------------------------------

def test_simulate_program_runs_kernels_in_order():
    rows, n = 5, 300
    x = _rng().standard_normal((rows, n), dtype=np.float32)
    w = np.linspace(0.5, 1.5, n).astype(np.float32)
    norm = rmsnorm_kernel(rows, n)
    act = KernelFunc("act", (Param("out"), Param("y", const=False, size=rows * n)),
                     ((rows * n + 127) // 128, 1, 1), (128, 1, 1),
                     (If(lt(_gid(128), I(rows * n)),
                         (GlobalStore("y", _gid(128), Call("relu", (GlobalLoad("out", _gid(128)),))),)),))
    t = TensorType((rows, n))
    prog = KernelProgram(buffers=(Buffer("x", t), Buffer("w", TensorType((n,)), "param")),
                         written=(Buffer("out", t, "temp"), Buffer("y", t, "output")),
                         kernels=(norm, act), outputs=("y",))
    stats = []
    (y,) = simulate_program(prog, {"x": x, "w": w}, stats=stats)
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-6) * w
    assert y.shape == (rows, n)
    np.testing.assert_allclose(y, np.maximum(ref, 0), rtol=1e-4, atol=1e-5)
    assert [s.kernel for s in stats] == ["rmsnorm", "act"]


def test_block_size_limit_is_opt_in_and_int_calls_stay_int():
    big = 1 << 26                                          # exact in int64, not in float32
    tid = S("tid.x")
    k = KernelFunc("wide", (Param("out", "int64", const=False),), (1, 1, 1), (2048, 1, 1),
                   (GlobalStore("out", tid, Call("add", (tid, I(big + 1)))),))
    out = np.zeros(2048, np.int64)
    simulate_kernel(k, {"out": out})                       # schedules in progress may be wide
    np.testing.assert_array_equal(out, np.arange(2048) + big + 1)
    with pytest.raises(SimulationError, match=r"kernel wide: 2048 threads per block, more than the 1024"):
        simulate_kernel(k, {"out": out}, max_block_threads=1024)
