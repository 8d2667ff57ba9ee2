"""cosine_similarity(x1, x2, dim, eps) as torch computes it: each operand divided by its
2-norm along dim (at least eps) first, then the products summed: within [-1, 1]."""
from __future__ import annotations

from .builder import Builder, broadcast_shapes
from .registry import rule
from .vector_norm import vector_norm


def _unit(b: Builder, x: str, dim: int, eps: float, name: str) -> str:
    norm = vector_norm(b, x, (dim,), 2, name)
    return b.elementwise("divide", x, b.elementwise("maximum", norm, float(eps), hint="norm_eps"), hint="unit")


@rule("cosine_similarity")
def decompose_cosine_similarity(op, b: Builder) -> str:
    x1, x2 = op.args
    shape = broadcast_shapes(b.shape(x1), b.shape(x2))
    x1, x2 = b.broadcast_to(x1, shape), b.broadcast_to(x2, shape)
    dim = op.attr("dim", 1) % len(shape)
    eps = op.attr("eps", 1e-8)
    products = b.elementwise("multiply", _unit(b, x1, dim, eps, op.name), _unit(b, x2, dim, eps, op.name),
                             hint="cos_terms")
    return b.reduce("sum", products, (dim,), keepdim=False, hint="cosine_similarity")
