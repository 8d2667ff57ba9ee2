"""Hopper's warpgroup MMA (passes/wgmma/) at the Kernel-IR level: a hand-built kernel stages
K-major bf16/fp16 tiles in shared memory with the 128-byte swizzle TMA writes, builds
shared-memory matrix descriptors, issues wgmma.mma_async m64nNk16 over K in steps of 16 and
stores the D fragment. The simulator decodes the descriptors and reads through the swizzle as
hardware does: the product matches numpy, and a planted wrong descriptor or fragment table
fails. The CUDA prints the PTX and compiles for sm_90a (skips without nvcc)."""
from __future__ import annotations

import numpy as np
import pytest

import deplokit.runtime.sim.wgmma as sim_wgmma
from deplokit.ir.fragments import WgmmaAccumulator, descriptor_bits, descriptor_fields, wgmma_accumulator
from deplokit.ir.kernel_ir import (
    Barrier,
    Binary,
    Const,
    DeclareArray,
    For,
    GlobalLoad,
    GlobalStore,
    KernelFunc,
    KernelProgram,
    Param,
    RegLoad,
    SharedArray,
    SharedStore,
    Special,
    Var,
    format_kernel,
)
from deplokit.ir.kernel_wgmma import Wgmma, WgmmaCommit, WgmmaDescriptor, WgmmaFence, WgmmaWait, uses_wgmma
from deplokit.passes.lower.cuda import render_cuda, render_program
from deplokit.runtime.nvcc import compile_cuda, nvcc_available
from deplokit.runtime.sass import compile_sass, sass_available
from deplokit.runtime.sim import SimulationError, simulate_kernel
from deplokit.target import get_target
from deplokit.trace import Context

M, KDIM = 64, 64          # one 128-byte swizzle row of halves along K: four k16 steps


def b(op, x, y):
    return Binary(op, x, y if not isinstance(y, int) else Const(y, "int"))


def stage(array, buf, rows):
    """array (rows x 64 halves, K-major) <- buf, each row 128 bytes, 8-row groups 1024 bytes
    apart, 16-byte chunks XORed with the row within the group (the 128B swizzle)."""
    i = Var("i")
    r, k = b("//", i, KDIM), b("%", i, KDIM)
    byte = b("+", b("+", b("*", b("//", r, 8), 1024), b("*", b("%", r, 8), 128)), b("*", k, 2))
    swz = b("^", byte, b("<<", b("&", b(">>", byte, 7), 7), 4))
    return For("i", Special("tid.x"), Const(rows * KDIM, "int"), Const(128, "int"),
               (SharedStore(array, b("//", swz, 2), GlobalLoad(buf, i)),))


def wgmma_kernel(n, dtype="bf16", stride=1024, swizzle=128):
    nd = n // 2
    body = [SharedArray("a_s", M * KDIM, align=1024, ctype=dtype),
            SharedArray("b_s", n * KDIM, align=1024, ctype=dtype),
            stage("a_s", "a", M), stage("b_s", "bt", n), Barrier(),
            DeclareArray("acc", nd, 0.0), WgmmaFence()]
    for ks in range(KDIM // 16):        # the descriptor's start steps 32 bytes along the row
        body += [WgmmaDescriptor(f"da{ks}", "a_s", Const(16 * ks, "int"), 16, stride, swizzle),
                 WgmmaDescriptor(f"db{ks}", "b_s", Const(16 * ks, "int"), 16, stride, swizzle),
                 Wgmma(n, dtype, "acc", Const(0, "int"), f"da{ks}", f"db{ks}")]
    body += [WgmmaCommit(), WgmmaWait(0)]
    tid = Special("tid.x")
    w, lane = b("//", tid, 32), b("%", tid, 32)
    g, t = b(">>", lane, 2), b("%", lane, 4)
    for i in range(nd):
        row = b("+", b("+", b("*", w, 16), g), 8 * ((i >> 1) & 1))
        col = b("+", b("*", t, 2), 8 * (i >> 2) + (i & 1))
        body.append(GlobalStore("out", b("+", b("*", row, n), col), RegLoad("acc", Const(i, "int"))))
    params = (Param("a", size=M * KDIM), Param("bt", size=n * KDIM), Param("out", const=False, size=M * n))
    return KernelFunc(f"wgmma_{dtype}_n{n}", params, (1, 1, 1), (128, 1, 1), tuple(body))


def operands(n, dtype, seed=0):
    import torch
    rng = np.random.default_rng(seed)
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    a, bt = (torch.tensor(rng.standard_normal(s), dtype=torch.float32).to(tdt).float().numpy()
             for s in ((M, KDIM), (n, KDIM)))
    return a, bt


def run(k, a, bt, n):
    out = np.zeros(M * n, np.float32)
    simulate_kernel(k, {"a": a.reshape(-1).copy(), "bt": bt.reshape(-1).copy(), "out": out})
    return out.reshape(M, n)


@pytest.mark.parametrize("dtype,n", [("bf16", 64), ("f16", 40), ("bf16", 8), ("bf16", 256)])
def test_wgmma_through_128b_swizzle_matches_numpy(dtype, n):
    a, bt = operands(n, dtype)
    got = run(wgmma_kernel(n, dtype), a, bt, n)
    want = a.astype(np.float64) @ bt.astype(np.float64).T
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_planted_wrong_descriptor_stride_fails():
    a, bt = operands(64, "bf16")
    want = a.astype(np.float64) @ bt.astype(np.float64).T
    got = run(wgmma_kernel(64, stride=512), a, bt, 64)        # 8-row groups are 1024 bytes apart
    assert not np.allclose(got, want, atol=1e-3)
    got = run(wgmma_kernel(64, swizzle=64), a, bt, 64)        # written with the 128B pattern
    assert not np.allclose(got, want, atol=1e-3)


def test_a_planted_wrong_accumulator_fragment_fails(monkeypatch):
    def swapped(n):                     # the rows of warps 0 and 1 exchanged
        lay = wgmma_accumulator(n)
        return WgmmaAccumulator(n, lay.coords[32:64] + lay.coords[:32] + lay.coords[64:])
    monkeypatch.setattr(sim_wgmma, "wgmma_accumulator", swapped)
    a, bt = operands(64, "bf16")
    got = run(wgmma_kernel(64), a, bt, 64)
    assert not np.allclose(got, a.astype(np.float64) @ bt.astype(np.float64).T, atol=1e-3)


def test_accumulator_fragment_covers_the_tile_once_and_descriptor_round_trips():
    for n in (8, 136, 256):
        lay = wgmma_accumulator(n)
        cells = [rc for thread in lay.coords for rc in thread]
        assert len(cells) == len(set(cells)) == 64 * n
        assert {r for th in lay.coords[32:64] for r, _ in th} == set(range(16, 32))      # warp 1 owns rows 16..31
    with pytest.raises(ValueError):
        wgmma_accumulator(12)
    d = descriptor_bits(16, 1024, 128) | (0x2400 >> 4)
    assert descriptor_fields(d) == (0x2400, 16, 1024, 1)
    with pytest.raises(ValueError):
        descriptor_bits(16, 1000, 128)


def test_wgmma_needs_whole_warpgroups():
    k = wgmma_kernel(64)
    k = KernelFunc(k.name, k.params, k.grid, (64, 1, 1), k.body)
    a, bt = operands(64, "bf16")
    with pytest.raises(SimulationError, match="warpgroup"):
        run(k, a, bt, 64)


def test_kernel_ir_text_and_cuda_spell_wgmma():
    k = wgmma_kernel(64)
    text = format_kernel(k)
    assert "u64 da1 = smem_desc(shared a_s[16], leading 16B, stride 1024B, swizzle 128B)" in text
    assert "acc[0 +0..32] += wgmma.m64n64k16.bf16(smem da0, smem db0) async" in text
    assert "wgmma.fence" in text and "wgmma.commit_group" in text and "wgmma.wait_group 0" in text
    assert uses_wgmma(k) and not uses_wgmma(KernelFunc("x", (), (1, 1, 1), (1, 1, 1), ()))
    cuda = render_program(KernelProgram((), (), (k,), ()), 90)
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in cuda
    assert "wgmma.fence.sync.aligned;" in cuda and "wgmma.wait_group.sync.aligned 0;" in cuda
    assert f"0x{descriptor_bits(16, 1024, 128):016x}ull" in cuda
    with pytest.raises(ValueError, match="sm_90"):
        render_program(KernelProgram((), (), (k,), ()), 80)
    loose = tuple(SharedArray(s.name, s.size, 16, s.ctype) if isinstance(s, SharedArray) else s for s in k.body)
    with pytest.raises(ValueError, match="aligned to 1024"):      # the swizzle repeats every 1024 bytes
        render_program(KernelProgram((), (), (KernelFunc(k.name, k.params, k.grid, k.block, loose),), ()), 90)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_wgmma_cuda_compiles_for_sm_90a(dtype):
    k = wgmma_kernel(64, dtype)
    source = render_cuda(KernelProgram((), (), (k,), ()), Context(get_target("sm_90")))
    assert source.arch_specific and source.build_arch("sm_90") == "sm_90a"     # decided from the IR
    assert "-arch=sm_90a" in str(source)
    result = compile_cuda(str(source), source.build_arch("sm_90"), kernel_names=source.kernels)
    assert result.cubin and result.stats[k.name].registers > 0


@pytest.mark.skipif(not sass_available(), reason="nvcc and cuobjdump/nvdisasm not installed")
def test_wgmma_sass_is_hgmma_and_no_hmma():
    k = wgmma_kernel(64)
    program = KernelProgram((), (), (k,), ())
    source = render_cuda(program, Context(get_target("sm_90")))
    mix = compile_sass(source, program, "sm_90", "sm_90").kernel(k.name).mix
    assert mix.hgmma == KDIM // 16 and mix.hmma == 0 and mix.ldsm == 0
