"""Issue 13 defect 5, finished: integers are computed exactly at their width on every backend
(the simulator holds int64 / int32 locals as numpy integers, the CUDA declares them `long long`
/ `int`, casts explicit), and a kernel whose offsets can pass 2**31 - 1 computes its indices in
64 bits, decided once (KernelFunc.index_bits) and checked by the simulator.

No test allocates a 2**31-element tensor: the wide kernels are compiled (torch.export captures
shapes only) and their decision and CUDA are checked, nvcc compiling it where installed."""
from __future__ import annotations

import pytest
import torch
from defect_checks import needs_nvcc

import deplokit
from deplokit.ir import kernel_ir as K
from deplokit.ir.index import var
from deplokit.ir.kernel_split import AtomicInc
from deplokit.ir.loop_ir import Load, Loop, Store
from deplokit.ir.tile_ir import BLOCK, Tile, TileAxis, TileKernel
from deplokit.ir.types import TensorType
from deplokit.passes.lower.index_width import index_bits
from deplokit.runtime.nvcc import nvcc_available
from deplokit.runtime.sim import SimulationError, simulate_kernel

BACKENDS = ("tensor", "loop", "sim")


def _exact_everywhere(fn, *inputs, **kwargs):
    """Every backend returns eager's values and dtypes bit for bit; the CUDA passes nvcc."""
    c = deplokit.compile(fn, *inputs, **kwargs)
    want = fn(*inputs)
    for backend in BACKENDS:
        got = c.run(*inputs, backend=backend)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert g.dtype == w.dtype, (backend, g.dtype, w.dtype)
            assert torch.equal(g, w), (backend, g, w)
    if nvcc_available():
        c.nvcc()
    return c


@pytest.mark.parametrize("base", [2 ** 24, 2 ** 40, 2 ** 62], ids=["2**24", "2**40", "2**62"])
def test_int64_plus_one_is_exact(base):
    x = torch.tensor([base - 1, base, base + 1, base + 3, -base - 5, 7, 0, -1])
    c = _exact_everywhere(lambda x: x + 1, x)
    assert "long long" in str(c.cuda) and "float" not in str(c.cuda).split("{", 1)[1]


def test_int64_sum_and_cumsum_past_2_24():
    x = torch.full((1000,), 2 ** 24 + 1, dtype=torch.int64)
    x[::7] = -(2 ** 30) - 3
    _exact_everywhere(lambda x: x.sum(), x)
    _exact_everywhere(lambda x: x.cumsum(0), x[:97])
    _exact_everywhere(lambda x: x.view(8, 125).sum(-1), x)      # a reduction per row


def test_int64_matmul_register_tiles_hold_integers():
    a = torch.randint(-2 ** 20, 2 ** 20, (64, 96))
    b = torch.randint(-2 ** 20, 2 ** 20, (96, 80))
    c = _exact_everywhere(lambda a, b: a @ b, a, b)
    arrays = [s for k in c.kernel_ir.kernels for s in K.walk_stmts(k.body) if isinstance(s, K.DeclareArray)]
    assert arrays and all(s.ctype == "int64" for s in arrays)
    # few outputs, long K: split-K partial sums in an int64 workspace, added up as integers
    a, b = torch.randint(-2 ** 20, 2 ** 20, (16, 4096)), torch.randint(-2 ** 20, 2 ** 20, (4096, 16))
    c = _exact_everywhere(lambda a, b: a @ b, a, b)
    # split-K: a reducer kernel, or the last block of each tile adding the partials (a counter)
    split_in_kernel = any(isinstance(s, AtomicInc) for k in c.kernel_ir.kernels for s in K.walk_stmts(k.body))
    assert len(c.kernel_ir.kernels) > 1 or split_in_kernel


def test_int64_max_and_min_reductions_start_from_the_integer_extremes():
    x = torch.tensor([[-(2 ** 62), -(2 ** 62) - 1, -(2 ** 40)], [2 ** 62, 2 ** 62 + 1, 3]])
    _exact_everywhere(lambda x: (x.amax(-1), x.amin(-1)), x)


def test_int32_arithmetic_wraps_as_torch():
    x = torch.tensor([2 ** 31 - 1, 2 ** 31 - 5, -(2 ** 31), 0, 12345], dtype=torch.int32)
    c = _exact_everywhere(lambda x: x + 10, x)
    assert (c.run(x, backend="sim")[0] < 0).item()                   # 2**31 - 1 + 10 wrapped
    _exact_everywhere(lambda x: x * 3, x)
    _exact_everywhere(lambda x: x.long() * 3, x)                     # widened first: no wrap


def test_int64_to_int32_cast_wraps_and_float_to_int_truncates():
    x = torch.tensor([2 ** 32 + 5, -(2 ** 31) - 1, 7, -7])
    _exact_everywhere(lambda x: x.int() + 1, x)
    f = torch.tensor([2.7, -2.7, 1e9, -0.5, 16777217.0])
    _exact_everywhere(lambda f: f.long() * 3, f)


def test_floor_divide_and_remainder_with_negatives():
    x = torch.tensor([7, -7, 6, -6, 0, 2 ** 40 + 3, -(2 ** 40) - 3, 1])
    for d in (3, -3):
        _exact_everywhere(lambda x, d=d: (x // d, x % d), x)
    y = torch.tensor([3, -3, 4, -4, 5, -5, 7, 2])
    _exact_everywhere(lambda x, y: (x // y, x % y, torch.div(x, y, rounding_mode="floor"),
                                    torch.div(x, y, rounding_mode="trunc")), x, y)
    # floats: the quotient truncated toward zero, as torch's trunc(a / b)
    f = torch.tensor([7.5, -7.5, 5.0, -5.0, 0.1, -0.1, 3.0, -1e-8])
    c = deplokit.compile(lambda f: (torch.div(f, 2.5, rounding_mode="trunc"),
                                    torch.div(f, -0.7, rounding_mode="trunc")), f)
    for backend in BACKENDS:
        assert c.check(f, backend=backend, rtol=0.0, atol=0.0).ok, backend


def test_float_floor_divide_and_remainder_follow_torch():
    x = torch.tensor([7.5, -7.5, 5.0, -5.0, 0.1, -0.1, 3.0, -1e-8])
    c = deplokit.compile(lambda x: (x // 2.5, x % -2.5, x % 0.7, x // -0.3), x)
    for backend in BACKENDS:
        assert c.check(x, backend=backend, rtol=0.0, atol=0.0).ok, backend


def test_true_division_of_integers_is_float():
    x = torch.tensor([7, -7, 2 ** 40, 1])
    c = _exact_everywhere(lambda x: x / 2, x)
    assert "(float)" in str(c.cuda)


def test_integer_powers_are_multiplies_and_float_functions_of_integers_are_float():
    x = torch.tensor([3, -5, 2 ** 20, 7, 0, -1])
    _exact_everywhere(lambda x: (x ** 2, x.pow(3), x ** 0, x.int() ** 3), x)
    with pytest.raises(deplokit.DeplokitError, match="whole exponent"):
        deplokit.compile(lambda x: x ** x, x)
    c = deplokit.compile(lambda x: (torch.exp(x.clamp(max=20)), torch.sqrt(x.abs()), x.sigmoid()), x)
    assert all(t.dtype == torch.float32 for t in c.run(x, backend="sim"))
    for backend in BACKENDS:
        assert c.check(x, backend=backend).ok, backend


def test_comparisons_of_int64_are_exact():
    x = torch.tensor([2 ** 40, 2 ** 40 + 1, 2 ** 40 - 1, 5])
    _exact_everywhere(lambda x: (x > 2 ** 40, x == 2 ** 40 + 1, torch.where(x != 5, x, -x)), x)
    # a constant that is no whole number compares as float, as torch promotes it
    _exact_everywhere(lambda x: (x < 2.5, x > float("inf"), x != float("nan"), torch.where(x > 5, x, 0.5)), x)


def test_argmax_indices_of_int64_values():
    i = torch.tensor([[2 ** 40, 2 ** 40 + 1, 5, 2 ** 40 + 1], [-3, -(2 ** 40), 7, 8]])
    _exact_everywhere(lambda i: (i.argmax(-1), i.argmin(-1)), i)
    x = torch.randn(3, 300)
    _exact_everywhere(lambda x: x.argmax(-1) + 2 ** 33, x)


def test_position_ids_from_arange_and_an_offset():
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    past = torch.tensor([2 ** 33])

    def position_ids(mask, past):
        pos = mask.long().cumsum(-1) - 1
        pos = pos.masked_fill(mask == 0, 1)
        return pos + past, torch.arange(6) + past

    _exact_everywhere(position_ids, mask, past)


# -- 64-bit index arithmetic ------------------------------------------------------------------------

def test_a_2_31_element_output_gets_64_bit_indices():
    c = deplokit.compile(lambda v: v.expand(2 ** 16, 2 ** 15) * 2, torch.randn(1, 1))
    (k,) = c.kernel_ir.kernels
    assert k.index_bits == 64
    cuda = str(c.cuda)
    assert "long long bid = blockIdx.x;" in cuda and "\n    int " not in cuda
    assert "# 64-bit index arithmetic" in str(c.kernel_ir)
    if nvcc_available():
        c.nvcc()


def test_a_gather_from_a_huge_table_gets_64_bit_indices():
    c = deplokit.compile(lambda t, i: t.expand(2**20, 2**12)[i] + 1, torch.randn(1, 1), torch.tensor([3, 2**20 - 1]))
    assert all(k.index_bits == 64 for k in c.kernel_ir.kernels if any(p.size >= 2 ** 31 for p in k.params))


def test_small_kernels_keep_32_bit_indices():
    c = deplokit.compile(lambda x: x * 2 + 1, torch.randn(64, 129))
    assert all(k.index_bits == 32 for k in c.kernel_ir.kernels)
    assert not [line for line in str(c.cuda).splitlines() if "long long" in line and not line.startswith("//")]


def _copy_kernel(rows: int, cols: int) -> TileKernel:
    body = (
        Loop("a1", cols, "free", (Load("in0", "x", (var("a0"), var("a1"))), Store("y", (var("a0"), var("a1")), "in0"))),
    )
    return TileKernel("copy", ("y",), (Tile((TileAxis("a0", rows, BLOCK),), body),))


def test_index_width_decision_on_the_ir():
    small = {"x": TensorType((1024, 1024)), "y": TensorType((1024, 1024))}
    big = {"x": TensorType((2 ** 16, 2 ** 15)), "y": TensorType((2 ** 16, 2 ** 15))}
    assert index_bits(_copy_kernel(1024, 1024), small, 1024) == 32
    assert index_bits(_copy_kernel(2 ** 16, 2 ** 15), big, 2 ** 16) == 64
    # exactly 2**31 - 1 elements still fits 32-bit offsets
    edge = {"x": TensorType((2 ** 31 - 1, 1)), "y": TensorType((2 ** 31 - 1, 1))}
    assert index_bits(_copy_kernel(2 ** 31 - 1, 1), edge, 2 ** 31 - 1) == 32


def _overflowing_kernel(bits: int) -> K.KernelFunc:
    # an index formed from a block id times a large stride: 3 * 2**30 overflows an int
    big = K.Binary("*", K.Special("bid.x"), K.Const(2 ** 30, "int"))
    body = (K.Declare("off", "int", big),
            K.GlobalStore("y", K.Binary("-", K.Var("off"), K.Var("off")), K.Const(1.0)))
    return K.KernelFunc("k", (K.Param("y", "float", False, 1),), (4, 1, 1), (1, 1, 1), body, index_bits=bits)


def test_simulator_checks_32_bit_index_ranges():
    import numpy as np
    with pytest.raises(SimulationError, match="overflows the kernel's 32-bit index arithmetic"):
        simulate_kernel(_overflowing_kernel(32), {"y": np.zeros(1, np.float32)})
    y = np.zeros(1, np.float32)
    simulate_kernel(_overflowing_kernel(64), {"y": y})
    assert y[0] == 1.0
    huge = np.broadcast_to(np.zeros(1, np.float32), (2 ** 31,))     # a view: nothing allocated
    with pytest.raises(SimulationError, match="more than 32-bit index arithmetic reaches"):
        simulate_kernel(_overflowing_kernel(32), {"y": huge})


@needs_nvcc
def test_64_bit_kernel_from_the_ir_compiles():
    from deplokit.passes.lower.cuda import render_kernel
    from deplokit.runtime.nvcc import compile_cuda
    text = render_kernel(_overflowing_kernel(64), 90)
    assert "long long off = (long long)blockIdx.x * 1073741824LL;" in text
    compile_cuda(text, "sm_90")
