"""linalg_vector_norm (x.norm(), F.normalize): (sum |x|^p)^(1/p) over some axes; p = 2 is
sqrt(sum x*x), p = inf the largest |x|, p = 1 the sum of |x|. dist(x, y, p): the norm of
x - y over every element."""
from __future__ import annotations

import math

from ...errors import UnsupportedOpError
from .builder import Builder, normalize_axes
from .registry import rule


@rule("vector_norm")
def decompose_vector_norm(op, b: Builder) -> str:
    x = op.args[0]
    axes = normalize_axes(op.attr("dim") or None, len(b.shape(x)))
    out = vector_norm(b, x, axes, op.attr("ord", 2), op.name)
    if not op.attr("keepdim", False) and axes:
        out = b.squeeze(out, axes)
    return out


@rule("dist")
def decompose_dist(op, b: Builder) -> str:
    diff = b.elementwise("subtract", op.args[0], op.args[1], hint="diff")
    rank = len(b.shape(diff))
    return b.squeeze(vector_norm(b, diff, tuple(range(rank)), op.attr("p", 2), op.name), tuple(range(rank)))


def vector_norm(b: Builder, x: str, axes: tuple[int, ...], p, name: str) -> str:
    """The p-norm of x over `axes`, kept as extent-1 axes."""
    mag = b.elementwise("abs", x, hint="mag")
    if p == math.inf:
        out = b.reduce("max", mag, axes, hint="norm")
    elif p == -math.inf:
        out = b.reduce("min", mag, axes, hint="norm")
    elif p == 2:
        out = b.elementwise("sqrt", b.reduce("sum", b.elementwise("multiply", x, x, hint="sq"), axes, hint="ss"))
    elif p == 1:
        out = b.reduce("sum", mag, axes, hint="norm")
    elif isinstance(p, (int, float)) and p > 0:
        powered = b.reduce("sum", b.elementwise("pow", mag, float(p)), axes, hint="psum")
        out = b.elementwise("pow", powered, 1.0 / p, hint="norm")
    else:
        raise UnsupportedOpError(f"vector norm of order {p!r} (node {name}); deplokit supports p > 0 and inf")
    return out
