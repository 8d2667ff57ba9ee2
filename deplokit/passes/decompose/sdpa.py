"""scaled_dot_product_attention: softmax(q @ k^T * scale + mask) @ v.

GQA (fewer k/v heads than q heads) reads k and v at head h // group instead of copying
them; a causal mask compares axis positions, so no mask tensor is ever built.
"""
from __future__ import annotations

import math

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, const, floordiv, var
from ...ir.tensor_ir import Axis
from .builder import Builder
from .registry import rule
from .softmax import masked_softmax, softmax_parts


@rule("scaled_dot_product_attention")
def decompose_sdpa(op, b: Builder) -> str:
    q, k, v = op.args[:3]
    mask = op.args[3] if len(op.args) > 3 else None
    if op.attr("dropout_p", 0.0):
        raise UnsupportedOpError("scaled_dot_product_attention with dropout_p > 0 is not supported")
    qs, ks, vs = b.shape(q), b.shape(k), b.shape(v)
    if len(qs) < 2 or len(ks) != len(qs) or len(vs) != len(qs):
        raise UnsupportedOpError(f"scaled_dot_product_attention needs q, k, v of equal rank, got {qs}, {ks}, {vs}")
    *batch, S, D = qs
    T, Dv = ks[-2], vs[-1]
    nb = len(batch)
    scale = op.attr("scale")
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)

    def head_index(shape):
        """Batch index of k or v: heads divide into groups when there are fewer of them."""
        out = []
        for p, e in enumerate(shape[:nb]):
            if e == batch[p]:
                out.append(var(DIM_NAMES[p]))
            elif e == 1:
                out.append(const(0))
            elif batch[p] % e == 0:
                out.append(floordiv(var(DIM_NAMES[p]), batch[p] // e, {DIM_NAMES[p]: batch[p]}))
            else:
                raise UnsupportedOpError(f"scaled_dot_product_attention: {batch[p]} query heads do not "
                                         f"divide into {e} key/value heads")
        return out

    # scores: (..., S, D, T) summed over D
    scores = _contract(b, q, lambda m, k_: (m, k_), k, lambda k_, n: tuple(head_index(ks)) + (n, k_),
                       tuple(batch), (S, D, T), "qk", "scores")
    scores_shape = tuple(batch) + (S, T)
    scores = b.elementwise("multiply", scores, scale, hint="scaled")
    if op.attr("is_causal", False):
        future = b.elementwise("greater", Axis(nb + 1), Axis(nb), hint="future", shape=scores_shape)
        scores = b.elementwise("where", future, float("-inf"), scores, hint="causal")
    if mask is not None:
        if b.type(mask).dtype == "bool":
            scores = b.elementwise("where", mask, scores, float("-inf"), hint="masked")
        else:
            scores = b.elementwise("add", scores, mask, hint="masked")
    if mask is None:
        _, e, ssum = softmax_parts(b, scores, nb + 1)
        probs = b.elementwise("divide", e, ssum, hint="probs")
    else:   # a query the mask hides from every key attends to nothing (zeros), as in torch
        probs = masked_softmax(b, scores, nb + 1)
    # out: (..., S, T, Dv) summed over T
    return _contract(b, probs, lambda m, k_: (m, k_), v, lambda k_, n: tuple(head_index(vs)) + (k_, n),
                     tuple(batch), (S, T, Dv), "pv", "attn")


def _contract(b: Builder, lhs: str, lhs_index, rhs: str, rhs_index, batch: tuple, mkn: tuple, hint: str,
              out_hint: str) -> str:
    """(..., M, K) x (..., K, N) -> (..., M, N) over a shared batch, where lhs_index(m, k) and
    rhs_index(k, n) give each operand's index in the (..., M, K, N) product."""
    nb = len(batch)
    m, k, n = (var(DIM_NAMES[nb + i]) for i in range(3))
    shape = batch + mkn
    lead = tuple(var(DIM_NAMES[p]) for p in range(nb))
    l_bc = b.index_map(lhs, lead + tuple(lhs_index(m, k)), shape, f"{lhs}_bc")
    r_bc = b.index_map(rhs, tuple(rhs_index(k, n)), shape, f"{rhs}_bc")
    prod = b.elementwise("multiply", l_bc, r_bc, hint=hint)
    red = b.reduce("sum", prod, (nb + 1,), hint=f"{hint}_sum")
    index = lead + (var(DIM_NAMES[nb]), const(0), var(DIM_NAMES[nb + 1]))
    return b.index_map(red, index, batch + (mkn[0], mkn[2]), out_hint)
