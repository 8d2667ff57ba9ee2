"""The decomposition Builder's index maps (broadcast, reshape, permute, squeeze, slice-like
maps) against numpy, run by both interpreters: the Tensor-IR one evaluates each map on
its own, the Loop-IR one after fusion has composed the maps by substitution."""
from __future__ import annotations

import random

import numpy as np
import pytest

from deplokit.ir.index import DIM_NAMES, var
from deplokit.ir.tensor_ir import IndexMap, TensorProgram
from deplokit.ir.types import Buffer, TensorType
from deplokit.passes.decompose.builder import Builder, broadcast_shapes, normalize_axes, resolve_shape
from deplokit.pipeline import Context, lower_through
from deplokit.runtime.loop_interp import run_loop_ir
from deplokit.runtime.tensor_interp import run_tensor_ir
from deplokit.target import get_target


def _run_both(b: Builder, x: np.ndarray, out: str) -> list[np.ndarray]:
    prog = TensorProgram((Buffer("x", TensorType(x.shape)),), tuple(b.nodes), (out,))
    loop = lower_through(prog, "fuse_rows", Context(get_target("sm_90")), first="lift")
    return [run_tensor_ir(prog, {"x": x})[0], run_loop_ir(loop, {"x": x})[0]]


def _x(shape):
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) * 0.5 - 3


@pytest.mark.parametrize("src,target", [
    ((37,), (5, 37)), ((1, 37), (3, 37)), ((3, 1, 5), (2, 3, 4, 5)), ((1,), (4, 1, 3)), ((), (2, 3)),
    ((129, 1), (129, 13)),
], ids=str)
def test_broadcast_to(src, target):
    b = Builder({"x": TensorType(src)})
    out = b.broadcast_to("x", target)
    x = _x(src)
    # Its index reads size-1 axes at 0 and leading new axes not at all.
    node = b.nodes[-1]
    assert isinstance(node, IndexMap) and node.type.shape == target and len(node.index) == len(src)
    for got in _run_both(b, x, out):
        np.testing.assert_array_equal(got, np.broadcast_to(x, target))


def test_broadcast_to_same_shape_is_free_and_bad_shapes_raise():
    from deplokit.errors import UnsupportedOpError
    b = Builder({"x": TensorType((3, 4))})
    assert b.broadcast_to("x", (3, 4)) == "x" and not b.nodes
    with pytest.raises(UnsupportedOpError):
        b.broadcast_to("x", (3, 5))
    with pytest.raises(UnsupportedOpError):
        b.broadcast_to("x", (4,))


@pytest.mark.parametrize("src,target", [
    ((6, 35), (210,)), ((6, 35), (10, 21)), ((6, 35), (2, 3, 5, 7)), ((2, 37, 64), (2, 37, 4, 16)),
    ((2, 4, 37, 16), (8, 592)), ((3, 1, 37), (1, 111, 1)), ((5,), (1, 5, 1)), ((6, 35), (-1, 7)),
    ((1, 1), (1,)), ((4, 6), (8, 3)),
], ids=str)
def test_reshape(src, target):
    b = Builder({"x": TensorType(src)})
    out = b.reshape("x", target, "v")
    x = _x(src)
    for got in _run_both(b, x, out):
        np.testing.assert_array_equal(got, x.reshape(target))


@pytest.mark.parametrize("src,dims", [
    ((3, 37, 13), (2, 0, 1)), ((3, 37, 13), (0, 2, 1)), ((2, 1, 37, 5), (0, 2, 3, 1)), ((5, 7), (1, 0)),
    ((2, 3, 4, 5), (3, 2, 1, 0)), ((2, 3), (-1, -2)),
], ids=str)
def test_permute(src, dims):
    b = Builder({"x": TensorType(src)})
    out = b.permute("x", dims, "p")
    x = _x(src)
    for got in _run_both(b, x, out):
        np.testing.assert_array_equal(got, np.transpose(x, [d % len(src) for d in dims]))


def test_identity_permute_adds_nothing():
    b = Builder({"x": TensorType((3, 4))})
    assert b.permute("x", (0, 1), "p") == "x" and not b.nodes


@pytest.mark.parametrize("src,axes", [((3, 1, 37, 1), (1, 3)), ((1, 5), (0,)), ((1, 1), (0, 1)), ((4, 1), (1,))],
                         ids=str)
def test_squeeze(src, axes):
    b = Builder({"x": TensorType(src)})
    out = b.squeeze("x", axes)
    x = _x(src)
    for got in _run_both(b, x, out):
        np.testing.assert_array_equal(got, np.squeeze(x, axes))


def test_keepdim_false_reduction_squeezes():
    b = Builder({"x": TensorType((3, 5, 7))})
    out = b.reduce("sum", "x", (1,), keepdim=False)
    x = _x((3, 5, 7))
    for got in _run_both(b, x, out):
        np.testing.assert_allclose(got, x.sum(1), rtol=1e-6)


def test_strided_window_index_map():
    """The slice rule's kind of map: x[:, 3:17:3] is x[i, j * 3 + 3]."""
    b = Builder({"x": TensorType((5, 20))})
    out = b.index_map("x", (var("i"), var("j") * 3 + 3), (5, 5), "s")
    x = _x((5, 20))
    for got in _run_both(b, x, out):
        np.testing.assert_array_equal(got, x[:, 3:17:3])


def test_padded_index_map_reads_pad_outside():
    b = Builder({"x": TensorType((3, 4))})
    out = b.index_map("x", (var("i"), var("j") - 2), (3, 9), "pad", pad=0.0)
    x = _x((3, 4))
    want = np.zeros((3, 9), np.float32)
    want[:, 2:6] = x
    for got in _run_both(b, x, out):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(30))
def test_random_movement_chains_compose(seed):
    """Random chains of reshape / permute / broadcast / squeeze, then one elementwise op so
    that fusion composes every map into a single load; both interpreters match numpy."""
    rng = random.Random(seed)
    shape = tuple(rng.choice([1, 2, 3, 4, 5, 6]) for _ in range(rng.randint(1, 4)))
    x = _x(shape)
    b = Builder({"x": TensorType(shape)})
    cur, ref = "x", x
    for step in range(6):
        kind = rng.choice(["reshape", "permute", "broadcast", "squeeze"])
        s = b.shape(cur)
        if kind == "reshape":
            n = int(np.prod(s))
            dims, rest = [], n
            for f in (2, 3, 5, 2, 3):
                if rest % f == 0 and rng.random() < 0.5:
                    dims.append(f)
                    rest //= f
            dims.append(rest)
            rng.shuffle(dims)
            cur, ref = b.reshape(cur, tuple(dims), "v"), ref.reshape(dims)
        elif kind == "permute" and len(s) > 1:
            dims = list(range(len(s)))
            rng.shuffle(dims)
            cur, ref = b.permute(cur, tuple(dims), "p"), np.transpose(ref, dims)
        elif kind == "broadcast" and len(s) < 5:
            target = (rng.choice([1, 2, 3]),) + tuple(e if e != 1 else rng.choice([1, 4]) for e in s)
            cur, ref = b.broadcast_to(cur, target), np.broadcast_to(ref, target)
        elif kind == "squeeze" and 1 in s:
            axes = tuple(d for d, e in enumerate(s) if e == 1)
            cur, ref = b.squeeze(cur, axes), np.squeeze(ref, axes)
    out = b.elementwise("add", cur, 1.0)
    for got in _run_both(b, x, out):
        np.testing.assert_array_equal(got, ref + np.float32(1))


def test_elementwise_broadcasts_operands_explicitly():
    b = Builder({"x": TensorType((37, 1)), "y": TensorType((129,))})
    out = b.elementwise("multiply", "x", "y")
    assert b.shape(out) == (37, 129)
    maps = [n for n in b.nodes if isinstance(n, IndexMap)]
    assert sorted(m.src for m in maps) == ["x", "y"] and all(m.type.shape == (37, 129) for m in maps)
    assert [str(e) for e in next(m for m in maps if m.src == "y").index] == ["j"]


@pytest.mark.parametrize("op,args,want", [
    ("add", ("f", 1.0), "float32"), ("add", ("i", 1), "int64"), ("multiply", ("i32", 2), "int32"),
    ("divide", ("i", 2), "float32"), ("add", ("i", 0.5), "float32"), ("add", ("f", "i"), "float32"),
    ("greater", ("f", 0.0), "bool"), ("where", ("m", 1, 0), "int64"), ("where", ("m", 1.0, 0), "float32"),
    ("where", ("m", "i", "i"), "int64"), ("where", ("m", "f", 0.0), "float32"), ("logical_not", ("m",), "bool"),
], ids=str)
def test_elementwise_result_dtype_follows_torch_promotion(op, args, want):
    b = Builder({"f": TensorType((3,)), "i": TensorType((3,), "int64"), "i32": TensorType((3,), "int32"),
                 "m": TensorType((3,), "bool")})
    out = b.elementwise(op, *args)
    assert b.type(out).dtype == want


def test_shape_helpers():
    assert broadcast_shapes((37, 1), (129,)) == (37, 129)
    assert broadcast_shapes((), (3,)) == (3,)
    assert normalize_axes(None, 3) == (0, 1, 2) and normalize_axes(-1, 3) == (2,)
    assert normalize_axes((-1, 0, 2), 3) == (0, 2)
    assert resolve_shape((-1, 7), (6, 35)) == (30, 7)
    assert DIM_NAMES.startswith("ijk")
