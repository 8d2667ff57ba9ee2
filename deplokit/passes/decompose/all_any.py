"""all and any: whether every (some) element over the axes is nonzero, as the least (largest)
of the int64 truth values x != 0, compared with 0; count_nonzero: their sum."""
from __future__ import annotations

from .builder import Builder, normalize_axes
from .copies import cast
from .registry import rule

_REDUCTION = {"all": "min", "any": "max"}


@rule("all", "any")
def decompose_all_any(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    axes = normalize_axes(op.attr("dim") or None, len(shape))
    truth = b.elementwise("not_equal", x, 0, hint="nonzero")
    truth = cast(b, truth, "int64", f"{op.op} (node {op.name})")
    red = b.reduce(_REDUCTION[op.op], truth, axes, keepdim=True, hint=f"{op.op}_red")
    out = b.elementwise("not_equal", red, 0, hint=op.op)
    if not op.attr("keepdim", False) and axes:
        out = b.squeeze(out, axes)
    return out


@rule("count_nonzero")
def decompose_count_nonzero(op, b: Builder) -> str:
    x = op.args[0]
    dim = op.attr("dim", None)
    axes = normalize_axes(dim if isinstance(dim, (list, tuple)) else (None if dim is None else (dim,)),
                          len(b.shape(x)))
    truth = cast(b, b.elementwise("not_equal", x, 0, hint="nonzero"), "int64", f"count_nonzero (node {op.name})")
    return b.reduce("sum", truth, axes, keepdim=False, hint="count_nonzero")
