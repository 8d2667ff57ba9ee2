"""The names CUDA C++ will not take as a kernel, parameter or variable name.

Every tensor becomes a kernel parameter (and a root tensor names its kernel), so a tensor
named `exp` gives `extern "C" __global__ void exp(...)`, which clashes with the C-linkage
`exp` of CUDA's math headers, and a buffer named `int` is a syntax error. Names are made
safe where they are made (capture, the Tensor-IR builder) with `c_safe`; the simulator's
name check (runtime/sim/names.py) rejects any that slip through, so `sim` never says ok
where nvcc fails.
"""
from __future__ import annotations

import os
import re

_KEYWORDS = """
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq
nullptr operator or or_eq private protected public register reinterpret_cast requires restrict
return short signed sizeof static static_assert static_cast struct switch template this
thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while xor xor_eq NULL main std
"""

# The lists below are what any CUDA toolkit declares; cuda_reserved_names.txt adds what
# one toolkit's headers (and its C library's) were found to declare.
# CUDA's built-in variables and vector types, and the device-runtime functions every
# translation unit sees.
_CUDA_BUILTINS = """
threadIdx blockIdx blockDim gridDim warpSize dim3 uint3 int2 int4 float2 float3 float4 double2
char1 char2 char4 uchar1 uchar2 uchar4 short2 short4 ushort2 ushort4 uint2 uint4 long2 long4
ulong2 longlong2 longlong4 half half2 nv_bfloat16 __half __nv_bfloat16 round_tf32 size_t ptrdiff_t
int8_t int16_t int32_t
int64_t uint8_t uint16_t uint32_t uint64_t printf assert clock clock64 malloc free calloc
realloc memcpy memset abort exit atomicAdd atomicSub atomicExch atomicMin atomicMax atomicInc
atomicDec atomicCAS atomicAnd atomicOr atomicXor min max umin umax llmin llmax ullmin ullmax
abs labs llabs div ldiv lldiv rand srand qsort bsearch atoi atof atol strtod strtof strtol
"""

# The C math library as CUDA declares it (extern "C"): each name also in its float (`f`)
# and long double (`l`) forms.
_MATH = """
acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh cospi cyl_bessel_i0
cyl_bessel_i1 erf erfc erfcinv erfcx erfinv exp exp10 exp2 expm1 fabs fdim floor fma fmax fmin
fmod frexp hypot ilogb isfinite isinf isnan j0 j1 jn ldexp lgamma llrint llround log log10
log1p log2 logb lrint lround modf nan nearbyint nextafter norm norm3d norm4d normcdf normcdfinv
pow rcbrt remainder remquo rhypot rint rnorm rnorm3d rnorm4d round rsqrt scalbln scalbn signbit
sin sincos sincospi sinh sinpi sqrt tan tanh tgamma trunc y0 y1 yn
"""



def _nvcc_rejected() -> frozenset[str]:
    """Every name nvcc 13 refuses for an extern "C" kernel, found by trying each function
    and macro its implicit headers declare (scripts/cuda_c_linkage_names.py writes it)."""
    path = os.path.join(os.path.dirname(__file__), "cuda_reserved_names.txt")
    with open(path) as f:
        return frozenset(line.strip() for line in f if line.strip() and not line.startswith("#"))


RESERVED = frozenset(_KEYWORDS.split()) | frozenset(_CUDA_BUILTINS.split()) | frozenset(
    f"{m}{suffix}" for m in _MATH.split() for suffix in ("", "f", "l")) | _nvcc_rejected()

# The shapes of the names fusion and scheduling give a kernel's locals: loop variables a0
# and what tiling derives from them (a0t, a0b, a2o, a2i, a0r, a0v), loads in0, values v0,
# accumulators acc0 (acc0_v), row-fused prefixes k0_, thread and block ids. A tensor of
# that shape would share a name with a local at every level below Loop IR.
GENERATED_LOCAL = re.compile(r"(?:(?:a|in|v|acc|k)[0-9]+[A-Za-z_0-9]*|tid|bid|lane|warp)\Z")

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def c_rejects(name: str) -> str | None:
    """Why CUDA C++ cannot use `name` as an identifier of a kernel, parameter or local;
    None when it can."""
    if not _IDENTIFIER.match(name):
        return "is not a C identifier"
    if name in RESERVED:
        return "is a C/C++ keyword or a CUDA built-in or math function"
    if "__" in name or re.match(r"_[A-Z]", name):
        return "is reserved to the compiler (a double underscore, or _ and a capital)"
    return None


def tensor_name_ok(name: str) -> bool:
    """Whether a tensor may keep `name`: C takes it, no generated local can have it, and
    no derived name (`name` + `_part0`, `_acc0`) gets a double underscore (`add_`, in place)."""
    return c_rejects(name) is None and not GENERATED_LOCAL.match(name) and not name.endswith("_")


def c_safe(name: str, taken=frozenset()) -> str:
    """`name` if it is a good tensor name (tensor_name_ok) not in `taken`, else the first
    free `name_N` (non-identifier characters become `_`, runs of `_` collapse to one)."""
    base = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", name)).rstrip("_") or "t"
    if base[0].isdigit() or base[0] == "_" or GENERATED_LOCAL.match(base):
        base = "t_" + base.lstrip("_")
    cand, n = base, 0
    while cand in taken or not tensor_name_ok(cand):
        n += 1
        cand = f"{base.rstrip('_')}_{n}"
    return cand
