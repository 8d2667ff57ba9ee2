"""softmax: exp(x - max) / sum(exp(x - max)) along one axis (max-subtracted for range)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule


def softmax_parts(b: Builder, x: str, dim: int) -> tuple[str, str, str]:
    """(shifted, exp(shifted), sum of exp) for a numerically stable softmax over dim."""
    m = b.reduce("max", x, (dim,), hint="max")
    shifted = b.elementwise("subtract", x, m, hint="shifted")
    e = b.elementwise("exp", shifted, hint="exp")
    s = b.reduce("sum", e, (dim,), hint="sum")
    return shifted, e, s


def masked_softmax(b: Builder, x: str, dim: int) -> str:
    """softmax as torch's attention computes it (_safe_softmax): a row whose every score is
    -inf (a query that a mask hides from every key) gives zeros instead of NaN."""
    m = b.reduce("max", x, (dim,), hint="max")
    shifted = b.elementwise("subtract", x, m, hint="shifted")
    e = b.elementwise("exp", shifted, hint="exp")
    s = b.reduce("sum", e, (dim,), hint="sum")
    probs = b.elementwise("divide", e, s, hint="probs")
    dead = b.elementwise("equal", m, float("-inf"), hint="masked_row")
    return b.elementwise("where", dead, 0.0, probs, hint="safe_probs")


@rule("softmax")
def decompose_softmax(op, b: Builder) -> str:
    _, e, s = softmax_parts(b, op.args[0], op.attr("dim"))
    return b.elementwise("divide", e, s)
