"""Kernel IR -> CUDA text -> nvcc: hand-built kernels rendered for sm_80/sm_90/sm_120,
compiled with nvcc (skipped cleanly without it), ptxas's stats parsed."""
import math

import pytest

from deplokit.errors import DeplokitError
from deplokit.ir.kernel_cp_async import CpAsync, CpAsyncCommit, CpAsyncWait
from deplokit.ir.kernel_ir import (
    Assign,
    Barrier,
    Binary,
    Call,
    Comment,
    Const,
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
    Special,
    Unary,
    Var,
    VectorLoad,
    VectorStore,
)
from deplokit.ir.kernel_tma import MbarrierInit, MbarrierWait, TmaLoad
from deplokit.ir.types import ctype_bytes
from deplokit.passes.lower.cuda import format_float, render_kernel, render_program
from deplokit.runtime import nvcc
from deplokit.runtime.nvcc import KernelStats, NvccError, compile_cuda, nvcc_available, parse_ptxas_log, ptx_arches

needs_nvcc = pytest.mark.skipif(not nvcc_available(), reason="nvcc (CUDA toolkit) not installed")

ARCHES = ("sm_80", "sm_90", "sm_120")


# -- hand-built kernels ----------------------------------------------------------------------

def V(name):
    return Var(name)


def I(value):
    return Const(value, "int")


def F(value):
    return Const(float(value))


def add(a, b):
    return Binary("+", a, b)


def mul(a, b):
    return Binary("*", a, b)


TID, BID, LANE, WARP = Special("tid.x"), Special("bid.x"), Special("lane"), Special("warp")
OUT = lambda name: Param(name, const=False)  # noqa: E731


def pointwise():
    """relu(x + bias) * 0.5 over 1000 elements, 4 blocks of 256 threads: a bounds check."""
    i = V("i")
    return KernelFunc("k_add_relu", (Param("x"), Param("bias"), OUT("out")), (4, 1, 1), (256, 1, 1), (
        Declare("i", "int", add(mul(BID, I(256)), TID)),
        If(Binary("<", i, I(1000)), (
            GlobalStore("out", i, mul(Call("relu", (add(GlobalLoad("x", i),
                                                         GlobalLoad("bias", Binary("%", i, I(64)))),)),
                                      F(0.5))),
        )),
    ))


def _shuffle_sum(var, masks):
    return tuple(Assign(var, add(V(var), Shuffle(V(var), m))) for m in masks)


def rms_norm():
    """RMSNorm of a (32, 2048) row per block: strided sum of squares, warp shuffles, the 8
    warp partials combined through shared memory by warp 0, float4 normalise pass."""
    row = mul(V("a1"), I(2048))
    return KernelFunc("k_rms_norm", (Param("x"), Param("p_weight"), OUT("rms_norm")), (32, 1, 1), (256, 1, 1), (
        Declare("a1", "int", BID),
        Declare("a0", "int", TID),
        Declare("acc0", "float", F(0)),
        For("a2", V("a0"), I(2048), I(256), (
            Declare("in0", "float", GlobalLoad("x", add(row, V("a2")))),
            Assign("acc0", add(V("acc0"), mul(V("in0"), V("in0")))),
        )),
        Comment("sum within each warp, then across the 8 warps through shared memory"),
        *_shuffle_sum("acc0", (16, 8, 4, 2, 1)),
        SharedArray("acc0_smem", 8),
        If(Binary("==", LANE, I(0)), (SharedStore("acc0_smem", WARP, V("acc0")),)),
        Barrier(),
        If(Binary("==", WARP, I(0)), (
            Assign("acc0", Select(Binary("<", LANE, I(8)), SharedLoad("acc0_smem", LANE), F(0))),
            *_shuffle_sum("acc0", (4, 2, 1)),
            If(Binary("==", LANE, I(0)), (SharedStore("acc0_smem", I(0), V("acc0")),)),
        )),
        Barrier(),
        Declare("rstd", "float", Call("rsqrt", (add(mul(SharedLoad("acc0_smem", I(0)), F(1 / 2048)), F(1e-6)),))),
        For("a2", mul(V("a0"), I(4)), I(2048), I(1024), (
            VectorLoad(("in0", "in1", "in2", "in3"), "global", "x", add(row, V("a2"))),
            VectorLoad(("w0", "w1", "w2", "w3"), "global", "p_weight", V("a2")),
            VectorStore("global", "rms_norm", add(row, V("a2")),
                        tuple(mul(mul(V(f"in{j}"), V("rstd")), V(f"w{j}")) for j in range(4))),
        )),
    ))


def cp_async_copy():
    """A 1024-float tile per block staged by cp.async (16-byte cg copies), plus 256 floats of
    4-byte ca copies; wait, barrier, then each thread reads a neighbour's data."""
    base = mul(BID, I(1024))
    t4 = mul(V("t"), I(4))
    return KernelFunc("k_cp_async", (Param("x"), Param("y"), OUT("out")), (8, 1, 1), (256, 1, 1), (
        Declare("t", "int", TID),
        SharedArray("tile", 1024),
        SharedArray("ys", 256),
        CpAsync("tile", t4, "x", add(base, t4), nbytes=16),
        CpAsync("ys", V("t"), "y", add(mul(BID, I(256)), V("t")), nbytes=4),
        CpAsyncCommit(),
        CpAsyncWait(0),
        Barrier(),
        For("j", I(0), I(4), I(1), (
            Declare("k", "int", add(t4, V("j"))),
            GlobalStore("out", add(base, V("k")),
                        mul(SharedLoad("tile", Binary("%", add(V("k"), I(4)), I(1024))),
                            SharedLoad("ys", Binary("//", V("k"), I(4))))),
        ), unroll=True),
    ))


def vector_scale():
    """float4 global -> shared -> global with a barrier between (a transpose of lanes)."""
    g = mul(add(mul(BID, I(128)), TID), I(4))
    return KernelFunc("k_vec_scale", (Param("x"), OUT("out")), (16, 1, 1), (128, 1, 1), (
        SharedArray("stage", 512),
        VectorLoad(("v0", "v1", "v2", "v3"), "global", "x", g),
        VectorStore("shared", "stage", mul(TID, I(4)),
                    tuple(mul(V(f"v{j}"), F(2.0)) for j in range(4))),
        Barrier(),
        VectorLoad(("u0", "u1", "u2", "u3"), "shared", "stage",
                   mul(Binary("-", I(127), Special("tid.x")), I(4))),
        VectorStore("global", "out", g, (V("u0"), V("u1"), Unary("neg", V("u2")), V("u3"))),
    ))


def register_tile():
    """A register array (8 running maxima from -inf) and a 16-wide one initialised by a loop,
    indexed only by unrolled loop counters so both stay in registers."""
    body = (
        DeclareArray("m", 8, -math.inf),
        DeclareArray("s", 16, 1.0),
        Declare("base", "int", mul(add(mul(BID, I(64)), TID), I(8))),
        For("r", I(0), I(4), I(1), (
            For("c", I(0), I(8), I(1), (
                Assign("m", Binary("max", RegLoad("m", V("c")),
                                   GlobalLoad("x", add(mul(V("r"), I(65536)), add(V("base"), V("c"))))),
                       index=V("c")),
                Assign("s", add(RegLoad("s", V("c")), RegLoad("m", V("c"))), index=V("c")),
            ), unroll=True),
        ), unroll=True),
        For("c", I(0), I(8), I(1), (
            GlobalStore("out", add(V("base"), V("c")),
                        add(RegLoad("m", V("c")), RegLoad("s", add(V("c"), I(8))))),
        ), unroll=True),
    )
    return KernelFunc("k_reg_tile", (Param("x"), OUT("out")), (128, 1, 1), (64, 1, 1), body)


def tma_copy():
    """One 4 KiB TMA bulk copy per block completing on an mbarrier; all threads wait on it."""
    return KernelFunc("k_tma", (Param("x"), OUT("out")), (16, 1, 1), (256, 1, 1), (
        SharedArray("buf", 1024),
        MbarrierInit("bar", 1),
        Barrier(),
        TmaLoad("buf", I(0), "x", mul(BID, I(1024)), 1024, "bar"),
        MbarrierWait("bar", I(0)),
        For("j", I(0), I(4), I(1), (
            Declare("k", "int", add(mul(V("j"), I(256)), TID)),
            GlobalStore("out", add(mul(BID, I(1024)), V("k")), mul(SharedLoad("buf", V("k")), F(2))),
        ), unroll=True),
    ))


KERNELS = {f.__name__: f for f in (pointwise, rms_norm, cp_async_copy, vector_scale, register_tile, tma_copy)}


def kernels_for(arch):
    return [f() for name, f in KERNELS.items() if not (name == "tma_copy" and arch == "sm_80")]


def declared_smem(k):
    """Bytes of static shared memory the tree declares, laid out in the rendered order: the
    8-byte mbarriers (declared first), then each float array at its alignment."""
    arrays, mbarriers = [], set()

    def walk(stmts):
        for s in stmts:
            if isinstance(s, SharedArray):
                arrays.append(s)
            elif isinstance(s, MbarrierInit):
                mbarriers.add(s.name)
            for child in ("body", "then", "orelse"):
                walk(getattr(s, child, ()))
    walk(k.body)
    total = 8 * len(mbarriers)
    for a in arrays:
        total = -(-total // a.align) * a.align + ctype_bytes(a.ctype) * a.size
    return total


def program(arch):
    ks = tuple(kernels_for(arch))
    return KernelProgram(buffers=(), written=(), kernels=ks, outputs=("out",))


# -- compiled once per arch (the nvcc module's cache keeps them for the other tests) ---------

@pytest.fixture(scope="module", params=ARCHES)
def compiled(request):
    if not nvcc_available():
        pytest.skip("nvcc (CUDA toolkit) not installed")
    arch = request.param
    src = render_program(program(arch), int(arch[3:]))
    return arch, compile_cuda(src, arch, kernel_names=[k.name for k in kernels_for(arch)])


# -- rendering (no nvcc needed) --------------------------------------------------------------

def test_golden_pointwise_kernel():
    assert render_kernel(pointwise(), 90) == """\
// maximum as torch computes it: NaN where either operand is NaN (fmaxf returns the other)
static __device__ __forceinline__ float deplokit_fmaxf(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

// k_add_relu: grid (4, 1, 1), block (256, 1, 1)
extern "C" __global__ __launch_bounds__(256) void k_add_relu(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out) {
    int i = (int)blockIdx.x * 256 + (int)threadIdx.x;
    if (i < 1000) {
        out[i] = deplokit_fmaxf(x[i] + bias[i % 64], 0.0f) * 0.5f;
    }
}
"""


def test_golden_tma_kernel_sm90():
    assert render_kernel(tma_copy(), 90) == """\
// k_tma: grid (16, 1, 1), block (256, 1, 1)
extern "C" __global__ __launch_bounds__(256) void k_tma(const float* __restrict__ x, float* __restrict__ out) {
    __shared__ __align__(8) unsigned long long bar;  // mbarrier
    unsigned bar_addr;  // its shared address
    asm("mov.u32 %0, %1;\\n" : "=r"(bar_addr) : "r"(static_cast<unsigned>(__cvta_generic_to_shared(&bar))));
    __shared__ __align__(16) float buf[1024];
    if (threadIdx.x == 0) {  // one thread initialises the mbarrier
        asm volatile("mbarrier.init.shared.b64 [%0], %1;\\n" :: "r"(bar_addr), "r"(1) : "memory");
        // make the initialised mbarrier visible to the async proxy (the TMA unit)
        asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // one thread issues the bulk copy
        // bar expects 4096 more bytes this phase; the copy completes them
        asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;\\n"
                     :: "r"(bar_addr), "r"(4096) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\\n"
                     :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(&buf[0]))),
                        "l"(&x[(int)blockIdx.x * 1024]),
                        "r"(4096),
                        "r"(bar_addr)
                     : "memory");
    }
    {  // wait until mbarrier bar completes the phase of parity 0
        unsigned ready = 0;
        do {
            asm volatile("{\\n"
                         "    .reg .pred p;\\n"
                         "    mbarrier.try_wait.parity.shared.b64 p, [%1], %2;\\n"
                         "    selp.u32 %0, 1, 0, p;\\n"
                         "}\\n"
                         : "=r"(ready) : "r"(bar_addr), "r"(0) : "memory");
        } while (!ready);
    }
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
        int k = j * 256 + (int)threadIdx.x;
        out[(int)blockIdx.x * 1024 + k] = buf[k] * 2.0f;
    }
}
"""


def test_rms_norm_shape():
    text = render_kernel(rms_norm(), 90)
    assert "const int lane = threadIdx.x & 31;" in text
    assert "const int warp = threadIdx.x >> 5;" in text
    assert "for (int a2 = a0; a2 < 2048; a2 += 256) {" in text
    assert "acc0 += in0 * in0;" in text
    for m in (16, 8, 4, 2, 1):
        assert f"acc0 += __shfl_xor_sync(0xffffffffu, acc0, {m});" in text
    assert "__shared__ __align__(16) float acc0_smem[8];" in text
    assert text.count("__syncthreads();") == 2
    assert "acc0 = lane < 8 ? acc0_smem[lane] : 0.0f;" in text
    assert "float rstd = rsqrtf(acc0_smem[0] * 0.00048828125f + 1e-06f);" in text
    assert "*reinterpret_cast<const float4*>(&x[a1 * 2048 + a2]);" in text
    assert "*reinterpret_cast<float4*>(&rms_norm[a1 * 2048 + a2]) =" in text


def test_cp_async_register_and_vector_text():
    cp = render_kernel(cp_async_copy(), 80)
    assert 'asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n"\n' in cp
    assert '"l"(&x[(int)blockIdx.x * 1024 + t * 4])\n' in cp
    assert 'asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\\n"' in cp
    assert 'asm volatile("cp.async.commit_group;\\n" ::: "memory");' in cp
    assert 'asm volatile("cp.async.wait_group 0;\\n" ::: "memory");' in cp
    assert "#pragma unroll\n    for (int j = 0; j < 4; ++j) {" in cp
    assert "ys[k / 4]" in cp and "tile[(k + 4) % 1024]" in cp
    reg = render_kernel(register_tile(), 80)
    assert (
        "float m[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};" in reg
    )
    assert "float s[16];\n    #pragma unroll\n    for (int i = 0; i < 16; ++i) s[i] = 1.0f;" in reg
    assert "m[c] = deplokit_fmaxf(m[c], x[r * 65536 + (base + c)]);" in reg
    assert "s[c] += m[c];" in reg
    vec = render_kernel(vector_scale(), 80)
    assert ("    *reinterpret_cast<float4*>(&stage[(int)threadIdx.x * 4]) =\n"
            "        make_float4(v0 * 2.0f, v1 * 2.0f, v2 * 2.0f, v3 * 2.0f);\n") in vec
    assert "&stage[(127 - (int)threadIdx.x) * 4]" in vec
    assert "make_float4(u0, u1, -u2, u3)" in vec


def test_render_is_deterministic():
    for arch in ARCHES:
        p1, p2 = program(arch), program(arch)
        assert render_program(p1, int(arch[3:])) == render_program(p2, int(arch[3:]))
    text = render_program(program("sm_90"), 90)
    assert text.startswith("// Generated by deplokit from Kernel IR for sm_90: 6 kernels")
    assert "#include" not in text
    assert all(f" void {k.name}(" in text for k in kernels_for("sm_90"))


def test_tma_and_mbarrier_need_sm90():
    with pytest.raises(ValueError, match=r"TMA \(cp.async.bulk\) needs sm_90 or newer; target is sm_80"):
        render_kernel(KernelFunc("k", (Param("x"),), (1, 1, 1), (32, 1, 1), (
            SharedArray("b", 4), TmaLoad("b", I(0), "x", I(0), 4, "bar"))), 80)
    with pytest.raises(ValueError, match="sm_90"):
        render_kernel(tma_copy(), 80)
    with pytest.raises(ValueError, match="sm_90"):
        render_program(program("sm_90"), 80)
    assert "cp.async.bulk" in render_kernel(tma_copy(), 120)


def test_cp_async_needs_sm80():
    with pytest.raises(ValueError, match="cp.async needs sm_80 or newer; target is sm_75"):
        render_kernel(cp_async_copy(), 75)


def test_tma_inside_if_is_not_guarded_again():
    k = KernelFunc("k_elect", (Param("x"), OUT("out")), (1, 1, 1), (64, 1, 1), (
        SharedArray("buf", 64),
        If(Binary("==", TID, I(0)), (MbarrierInit("bar"),)),
        Barrier(),
        If(Binary("&&", Binary("==", WARP, I(1)), Binary("==", LANE, I(0))),
           (TmaLoad("buf", I(0), "x", I(0), 64, "bar"),)),
        MbarrierWait("bar", Binary("&", V("phase"), I(3))),
        GlobalStore("out", TID, SharedLoad("buf", TID)),
    ))
    text = render_kernel(k, 90)
    assert "if (warp == 1 && lane == 0) {\n        // bar expects 256 more bytes" in text
    assert "one thread" not in text                      # no extra guard inside an If
    assert '"r"(bar_addr), "r"(phase & 3 & 1)' in text


def test_expression_printing():
    def one(e, decl=()):
        k = KernelFunc("k", (OUT("out"),), (1, 1, 1), (1, 1, 1), (*decl, GlobalStore("out", I(0), e)))
        line = render_kernel(k, 90).splitlines()[-2].strip()
        assert line.startswith("out[0] = ") and line.endswith(";")
        return line[len("out[0] = "):-1]

    f = Declare("f", "float", F(1))
    n = Declare("n", "int", I(1))
    assert one(Binary("-", V("f"), Binary("-", V("f"), F(1))), (f,)) == "f - (f - 1.0f)"
    assert one(Binary("-", Binary("-", V("f"), F(1)), V("f")), (f,)) == "f - 1.0f - f"
    assert one(mul(add(V("f"), F(2)), F(-0.5)), (f,)) == "(f + 2.0f) * -0.5f"
    assert one(Binary("-", V("f"), F(-1e-6)), (f,)) == "f - -1e-06f"
    assert one(Unary("neg", Unary("neg", V("f"))), (f,)) == "-(-f)"
    assert one(Binary("max", V("f"), F(0)), (f,)) == "deplokit_fmaxf(f, 0.0f)"
    assert one(Binary("min", V("f"), F(0)), (f,)) == "deplokit_fminf(f, 0.0f)"
    assert one(Binary("min", V("n"), I(3)), (n,)) == "min(n, 3)"
    assert one(Binary("//", V("f"), F(2)), (f,)) == "floorf(f / 2.0f)"
    assert one(Binary("%", V("f"), F(2)), (f,)) == "fmodf(f, 2.0f)"
    assert one(add(Binary(">>", V("n"), I(5)), Binary("&", V("n"), I(31))), (n,)) == "(n >> 5) + (n & 31)"
    assert one(Binary("||", Binary("&&", V("n"), V("n")), V("n")), (n,)) == "(n && n) || n"
    assert one(Call("sigmoid", (V("f"),)), (f,)) == "1.0f / (1.0f + expf(-f))"
    assert one(Call("reciprocal", (add(V("f"), F(1)),)), (f,)) == "1.0f / (f + 1.0f)"
    assert one(Call("where", (Call("greater", (V("f"), F(0))), V("f"), Call("neg", (V("f"),)))), (f,)) == \
        "f > 0.0f ? f : -f"
    assert one(Call("pow", (V("f"), F(3))), (f,)) == "powf(f, 3.0f)"
    assert one(Call("logical_not", (Call("less", (V("f"), F(math.nan))),)), (f,)) == "!(f < NAN)"
    assert one(Call("erf", (V("f"),)), (f,)) == "erff(f)"
    assert one(Select(V("n"), F(math.inf), F(-math.inf)), (n,)) == "n ? INFINITY : -INFINITY"
    assert one(I(2**40)) == "1099511627776LL"
    with pytest.raises(ValueError, match="unknown function 'gelu'"):
        one(Call("gelu", (F(1),)))
    with pytest.raises(ValueError, match="unknown binary operator"):
        one(Binary("**", F(1), F(2)))


def test_float_constants_are_exact_float32():
    assert format_float(1e-6) == "1e-06f"
    assert format_float(2048.0) == "2048.0f"
    assert format_float(0.1) == "0.1f"
    assert format_float(1 / 3) == "0.33333334f"
    assert format_float(-0.0) == "-0.0f"
    assert format_float(1e39) == "INFINITY"                  # beyond float32
    assert format_float(-math.inf) == "-INFINITY"
    assert format_float(math.nan) == "NAN"
    import numpy as np
    for v in (1e-6, 0.1, 1 / 3, 3.4e38, 1.17549435e-38, 123456789.0, 2.5e-45):
        assert np.float32(float(format_float(v)[:-1])) == np.float32(v)


def test_bad_trees_raise_value_error():
    base = dict(name="k", params=(Param("x"), OUT("out")), grid=(1, 1, 1), block=(32, 1, 1))
    with pytest.raises(ValueError, match="'nope' is not a parameter"):
        render_kernel(KernelFunc(body=(GlobalStore("nope", I(0), F(1)),), **base), 90)
    with pytest.raises(ValueError, match="const"):
        render_kernel(KernelFunc(body=(GlobalStore("x", I(0), F(1)),), **base), 90)
    with pytest.raises(ValueError, match="cp.async of 12 bytes"):
        render_kernel(KernelFunc(body=(SharedArray("s", 4), CpAsync("s", I(0), "x", I(0), 12)), **base), 90)
    with pytest.raises(ValueError, match="no MbarrierInit"):
        render_kernel(KernelFunc(body=(SharedArray("s", 4), TmaLoad("s", I(0), "x", I(0), 4, "b")), **base), 90)
    with pytest.raises(ValueError, match="static shared memory"):
        render_kernel(KernelFunc(body=(SharedArray("s", 13000),), **base), 90)
    with pytest.raises(ValueError, match="unknown thread coordinate"):
        render_kernel(KernelFunc(body=(Declare("a", "int", Special("tid.w")),), **base), 90)
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        render_kernel(KernelFunc(body=(VectorLoad(("a", "b", "c", "d"), "global", "x", I(2)),), **base), 90)


def test_names_never_collide_with_the_printers_own():
    k = KernelFunc("k", (OUT("out"),), (1, 1, 1), (32, 2, 1), (
        Declare("lane", "int", I(7)),
        GlobalStore("out", Special("lane"), add(V("lane"), Special("warp"))),
    ))
    text = render_kernel(k, 90)
    assert "const int tid = threadIdx.x + 32 * threadIdx.y;  // flattened thread id" in text
    assert "const int lane1 = tid & 31;" in text and "const int warp = tid >> 5;" in text
    assert "out[lane1] = lane + warp;" in text


def test_parse_ptxas_log():
    log = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k2' for 'sm_80'
ptxas info    : Function properties for k2
    400 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 400 bytes cumulative stack size, 360 bytes cmem[0]
ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 1032 bytes smem, 368 bytes cmem[0]
"""
    assert parse_ptxas_log(log) == {
        "k2": KernelStats(registers=32, smem_bytes=0, spill_stores=8, spill_loads=12, stack_bytes=400),
        "k": KernelStats(registers=12, smem_bytes=1032, spill_stores=0, spill_loads=0, stack_bytes=0),
    }


def test_missing_nvcc_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("DEPLOKIT_NVCC", "/nonexistent/nvcc")
    assert not nvcc_available()
    with pytest.raises(NvccError, match="nvcc not found"):
        compile_cuda("// missing nvcc test\n", "sm_90")


def test_ptx_arches_and_bad_arch():
    assert ptx_arches() == ("sm_80", "sm_90", "sm_120")
    with pytest.raises(NvccError, match="unknown architecture"):
        compile_cuda("", "compute_90")


# -- nvcc ------------------------------------------------------------------------------------

@needs_nvcc
def test_every_kernel_compiles_with_parsed_stats(compiled):
    arch, result = compiled
    assert result.cubin[:4] == b"\x7fELF"
    assert result.arch == arch and "ptxas info" in result.log
    for k in kernels_for(arch):
        st = result.stats[k.name]
        assert 0 < st.registers <= 255, (k.name, st)
        assert st.smem_bytes == declared_smem(k), (k.name, st)
        assert st.spill_stores == st.spill_loads == 0, (k.name, st)
        assert st.stack_bytes == 0, (k.name, st)     # register arrays stayed in registers
    if arch != "sm_80":
        assert result.stats["k_tma"].smem_bytes == 8 + 8 + 4096   # mbarrier, padding to 16, buf


@needs_nvcc
def test_program_annotation_and_cache(compiled):
    arch, result = compiled
    src = render_program(program(arch), int(arch[3:]))
    assert compile_cuda(src, arch) is result              # cached: compiled once per process
    annotated = nvcc.annotate_program(program(arch), result)
    rms = next(k for k in annotated.kernels if k.name == "k_rms_norm")
    assert rms.smem_bytes == 32 and rms.registers == result.stats["k_rms_norm"].registers
    assert rms.spills == 0


@needs_nvcc
def test_single_kernel_compiles_standalone():
    result = compile_cuda(render_kernel(pointwise(), 90), "sm_90", kernel_names=["k_add_relu"])
    assert result.stats["k_add_relu"].smem_bytes == 0
    with pytest.raises(NvccError, match="no kernel named k_missing"):
        compile_cuda(render_kernel(pointwise(), 90), "sm_90", kernel_names=["k_missing"])


@needs_nvcc
def test_broken_kernel_quotes_the_source_line():
    k = KernelFunc("k_broken", (Param("x"), OUT("out")), (1, 1, 1), (32, 1, 1), (
        Declare("t", "int", TID),
        GlobalStore("out", V("t"), add(GlobalLoad("x", V("t")), V("undeclared_scale"))),
    ))
    src = render_kernel(k, 90)
    with pytest.raises(NvccError) as info:
        compile_cuda(src, "sm_90")
    msg = str(info.value)
    assert isinstance(info.value, DeplokitError)
    assert "error" in msg and "undeclared_scale" in msg
    assert "line 4: error: identifier \"undeclared_scale\" is undefined" in msg
    assert "    4 |     out[t] = x[t] + undeclared_scale;" in msg
    assert src.splitlines()[3] == "    out[t] = x[t] + undeclared_scale;"
    assert info.value.line == 4 and "identifier" in info.value.log


@needs_nvcc
def test_ptxas_error_quotes_the_ptx_line():
    src = ('extern "C" __global__ void k_fence() {\n'
           '    asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");\n}\n')
    with pytest.raises(NvccError) as info:
        compile_cuda(src, "sm_80")
    msg = str(info.value)
    assert msg.startswith("ptxas (sm_80) failed: PTX line ")
    assert "requires .target sm_90 or higher" in msg and "fence.proxy.async" in msg.splitlines()[1]


@needs_nvcc
def test_timeout_is_a_clear_error():
    with pytest.raises(NvccError, match=r"timed out after 0.001 s"):
        compile_cuda("// timeout test\n" + render_kernel(pointwise(), 90), "sm_90", timeout=0.001)
