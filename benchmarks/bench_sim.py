"""Times the SIMT simulator (deplokit.runtime.sim) on two hand-written Kernel-IR kernels:
an RMSNorm row reduction on x (32 rows x 2048) and a 512x512x512 shared-memory tiled matmul
(16x16 tiles). Prints seconds (targets: each <= 2 s). The kernel builders are shared with
tests/test_sim.py. Run: .venv/bin/python benchmarks/bench_sim.py"""
from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from deplokit.ir.kernel_ir import (  # noqa: E402
    Assign,
    Barrier,
    Binary,
    Call,
    Const,
    Declare,
    For,
    GlobalLoad,
    GlobalStore,
    If,
    KernelFunc,
    Param,
    Select,
    SharedArray,
    SharedLoad,
    SharedStore,
    Shuffle,
    Special,
    Var,
)
from deplokit.runtime.sim import simulate_kernel  # noqa: E402

# -- tiny builders -------------------------------------------------------------------------------

def I(v):       # noqa: E743 - int constant
    return Const(int(v), "int")


def F(v):
    return Const(float(v), "float")


def V(name):
    return Var(name)


def S(name):
    return Special(name)


def add(a, b):
    return Binary("+", a, b)


def mul(a, b):
    return Binary("*", a, b)


def lt(a, b):
    return Binary("<", a, b)


def eq(a, b):
    return Binary("==", a, b)


# -- kernels --------------------------------------------------------------------------------------

def rmsnorm_kernel(rows: int, n: int, eps: float = 1e-6, threads: int = 256,
                   first_barrier: bool = True, second_barrier: bool = True) -> KernelFunc:
    """out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w: one block per row, a strided
    loop, a warp reduction by shuffles (xor 16..1), the warp partials combined in shared
    memory by warp 0, the total broadcast through shared memory."""
    warps = threads // 32
    base = mul(S("bid.x"), I(n))
    body = (
        SharedArray("red", warps),
        Declare("ss", "float", F(0.0)),
        For("i", S("tid.x"), I(n), I(threads), (
            Declare("v", "float", GlobalLoad("x", add(base, V("i")))),
            Assign("ss", add(V("ss"), mul(V("v"), V("v")))),
        )),
        *[Assign("ss", add(V("ss"), Shuffle(V("ss"), m))) for m in (16, 8, 4, 2, 1)],
        If(eq(S("lane"), I(0)), (SharedStore("red", S("warp"), V("ss")),)),
        *((Barrier(),) if first_barrier else ()),
        If(eq(S("warp"), I(0)), (
            Declare("p", "float", Select(lt(S("lane"), I(warps)), SharedLoad("red", S("lane")), F(0.0))),
            *[Assign("p", add(V("p"), Shuffle(V("p"), m))) for m in (16, 8, 4, 2, 1)],
            If(eq(S("lane"), I(0)), (SharedStore("red", I(0), V("p")),)),
        )),
        *((Barrier(),) if second_barrier else ()),
        Declare("r", "float", Call("rsqrt", (add(Binary("/", SharedLoad("red", I(0)), F(n)), F(eps)),))),
        For("i", S("tid.x"), I(n), I(threads), (
            GlobalStore("out", add(base, V("i")),
                        mul(mul(GlobalLoad("x", add(base, V("i"))), V("r")), GlobalLoad("w", V("i")))),
        )),
    )
    return KernelFunc("rmsnorm", (Param("x", size=rows * n), Param("w", size=n),
                                  Param("out", const=False, size=rows * n)),
                      (rows, 1, 1), (threads, 1, 1), body)


def matmul_kernel(m: int, n: int, k: int, tile: int = 16, second_barrier: bool = True) -> KernelFunc:
    """C (m, n) = A (m, k) @ B (k, n), one output per thread, A and B tiles staged in shared
    memory (tile x tile), a K loop with a barrier after the loads and one after the use."""
    t = tile
    tx, ty = S("tid.x"), S("tid.y")
    row, col = V("row"), V("col")
    body = (
        SharedArray("As", t * t), SharedArray("Bs", t * t),
        Declare("row", "int", add(mul(S("bid.y"), I(t)), ty)),
        Declare("col", "int", add(mul(S("bid.x"), I(t)), tx)),
        Declare("acc", "float", F(0.0)),
        For("k0", I(0), I(k), I(t), (
            SharedStore("As", add(mul(ty, I(t)), tx),
                        Select(Binary("&&", lt(row, I(m)), lt(add(V("k0"), tx), I(k))),
                               GlobalLoad("A", add(mul(row, I(k)), add(V("k0"), tx))), F(0.0))),
            SharedStore("Bs", add(mul(ty, I(t)), tx),
                        Select(Binary("&&", lt(add(V("k0"), ty), I(k)), lt(col, I(n))),
                               GlobalLoad("B", add(mul(add(V("k0"), ty), I(n)), col)), F(0.0))),
            Barrier(),
            For("kk", I(0), I(t), I(1), (
                Assign("acc", add(V("acc"), mul(SharedLoad("As", add(mul(ty, I(t)), V("kk"))),
                                                  SharedLoad("Bs", add(mul(V("kk"), I(t)), tx))))),
            ), unroll=True),
            *((Barrier(),) if second_barrier else ()),
        )),
        If(Binary("&&", lt(row, I(m)), lt(col, I(n))), (
            GlobalStore("C", add(mul(row, I(n)), col), V("acc")),
        )),
    )
    grid = ((n + t - 1) // t, (m + t - 1) // t, 1)
    return KernelFunc("matmul_tiled", (Param("A", size=m * k), Param("B", size=k * n),
                                       Param("C", const=False, size=m * n)),
                      grid, (t, t, 1), body)


# -- timing ---------------------------------------------------------------------------------------

def _time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(repeats: int = 3) -> None:
    rng = np.random.default_rng(0)
    rows, n = 32, 2048
    x = rng.standard_normal((rows, n), dtype=np.float32)
    w = rng.standard_normal(n, dtype=np.float32)
    out = np.zeros(rows * n, np.float32)
    kr = rmsnorm_kernel(rows, n)
    t_rms = _time(lambda: simulate_kernel(kr, {"x": x.reshape(-1), "w": w, "out": out}), repeats)
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-6) * w
    err = float(np.abs(out.reshape(rows, n) - ref).max())

    m = nn = kk = 512
    a = rng.standard_normal((m, kk), dtype=np.float32)
    b = rng.standard_normal((kk, nn), dtype=np.float32)
    c = np.zeros(m * nn, np.float32)
    km = matmul_kernel(m, nn, kk)
    t_mm = _time(lambda: simulate_kernel(km, {"A": a.reshape(-1), "B": b.reshape(-1), "C": c}), repeats)
    err_mm = float(np.abs(c.reshape(m, nn) - a @ b).max())
    print(f"SIMT simulator, median of {repeats}:")
    print(f"  rmsnorm (1,32,2048), 32 blocks x 256 threads:         {t_rms:.3f} s (target <= 2 s), "
          f"max err {err:.1e}")
    print(f"  tiled matmul 512x512x512, 1024 blocks x 256 threads: {t_mm:.3f} s (target <= 2 s), "
          f"max err {err_mm:.1e}")


if __name__ == "__main__":
    main()
