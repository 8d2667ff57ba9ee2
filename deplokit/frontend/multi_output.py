"""Operators that return several tensors (split, chunk, unbind, max(dim) with indices, topk,
sort, var_mean and std_mean, aminmax), made
single-output at capture: each `getitem(op, i)` the program reads becomes its own Torch-IR
op (a slice, a select, an amax or an argmax), so every later IR keeps one result per node.

A piece's extent is read from torch's own result (node.meta["val"]), so split, chunk and
split_with_sizes share one rule and agree with torch on uneven last pieces.
"""
from __future__ import annotations

from typing import Callable

from .aten_table import variance_attrs

# (fx args with tensors as names, kwargs, torch's results, i) -> (Torch-IR op, args, attrs)
Piece = Callable[[tuple, dict, list, int], tuple[str, tuple, tuple]]


def _dim(args, kwargs, position: int, default: int = 0) -> int:
    return args[position] if len(args) > position else kwargs.get("dim", default)


def _along(position: int) -> Piece:
    """split / split_with_sizes / chunk / unsafe_split: piece i is a slice of one axis."""
    def piece(args, kwargs, vals, i):
        rank = vals[0].dim()
        dim = _dim(args, kwargs, position) % rank
        start = sum(int(v.shape[dim]) for v in vals[:i])
        end = start + int(vals[i].shape[dim])
        return "slice", (args[0],), (("dim", dim), ("start", start), ("end", end))
    return piece


def _unbind(args, kwargs, vals, i):
    return "select", (args[0],), (("dim", _dim(args, kwargs, 1)), ("index", i))


def _extremum(values_op: str, index_op: str) -> Piece:
    """max.dim / min.dim: (values, indices), as amax / amin and argmax / argmin."""
    def piece(args, kwargs, vals, i):
        dim = _dim(args, kwargs, 1)
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        if i == 0:
            return values_op, (args[0],), (("dim", (dim,)), ("keepdim", keepdim))
        return index_op, (args[0],), (("dim", dim), ("keepdim", keepdim))
    return piece


def _topk(args, kwargs, vals, i):
    """topk(x, k, dim, largest, sorted): (values, indices), one Torch-IR topk op per piece."""
    names = ("k", "dim", "largest", "sorted")
    defaults = {"dim": -1, "largest": True, "sorted": True}
    got = {n: args[1 + p] if len(args) > 1 + p else kwargs.get(n, defaults.get(n)) for p, n in enumerate(names)}
    attrs = tuple((n, got[n]) for n in names)
    return "topk", (args[0],), attrs + (("output", ("values", "indices")[i]),)


def _sort(args, kwargs, vals, i):
    """sort(x, dim, descending) and sort(x, stable=, dim=, descending=): (values, indices)."""
    dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
    descending = args[2] if len(args) > 2 else kwargs.get("descending", False)
    return "sort", (args[0],), (("dim", dim), ("descending", bool(descending)),
                                ("output", ("values", "indices")[i]))


def _moments(spread: str, unbiased: bool = False, whole: bool = False) -> Piece:
    """var_mean / std_mean: (var or std, mean) over the same axes, as var (std) and mean."""
    def piece(args, kwargs, vals, i):
        operands, attrs = variance_attrs(args, kwargs, unbiased=unbiased, whole=whole)
        if i == 0:
            return spread, operands, attrs
        return "mean", operands, tuple((k, v) for k, v in attrs if k != "correction")
    return piece


def _aminmax(args, kwargs, vals, i):
    """aminmax(x, dim=, keepdim=): (min, max), as amin and amax."""
    dim = kwargs.get("dim")
    dims = () if dim is None else (dim,)
    return ("amin", "amax")[i], (args[0],), (("dim", dims), ("keepdim", bool(kwargs.get("keepdim", False))))


# the splits and unbind: their pieces are views of the input
_VIEW_PIECES: dict[str, Piece] = {
    "split.Tensor": _along(2),
    "split_with_sizes.default": _along(2),
    "unsafe_split.Tensor": _along(2),
    "unsafe_split_with_sizes.default": _along(2),
    "chunk.default": _along(2),
    "unsafe_chunk.default": _along(2),
    "tensor_split.sections": _along(2),
    "tensor_split.indices": _along(2),
    "unbind.int": _unbind,
}
# the rest: computed values
_FRESH_PIECES: dict[str, Piece] = {
    "max.dim": _extremum("amax", "argmax"),
    "min.dim": _extremum("amin", "argmin"),
    "topk.default": _topk,
    "sort.default": _sort,
    "sort.stable": _sort,
    "var_mean.correction": _moments("var"),
    "var_mean.dim": _moments("var", unbiased=True),
    "var_mean.default": _moments("var", unbiased=True, whole=True),
    "std_mean.correction": _moments("std"),
    "std_mean.dim": _moments("std", unbiased=True),
    "std_mean.default": _moments("std", unbiased=True, whole=True),
    "aminmax.default": _aminmax,
}
MULTI_OUTPUT_OPS: dict[str, Piece] = {**_VIEW_PIECES, **_FRESH_PIECES}

# Multi-output ops whose pieces are fresh tensors, not views of the input: an in-place
# update of a piece (topk's values /= their sum) changes nothing else.
FRESH_PIECES = tuple(_FRESH_PIECES)
