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
from .softmax import softmax_parts


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

    def head_index(shape, dims):
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
    s_, d_, t_ = (var(DIM_NAMES[nb + i]) for i in range(3))
    shape = tuple(batch) + (S, D, T)
    q_bc = b.index_map(q, tuple(var(DIM_NAMES[p]) for p in range(nb)) + (s_, d_), shape, f"{q}_bc")
    k_bc = b.index_map(k, tuple(head_index(ks, nb)) + (t_, d_), shape, f"{k}_bc")
    qk = b.elementwise("multiply", q_bc, k_bc, hint="qk")
    red = b.reduce("sum", qk, (nb + 1,), hint="qk_sum")
    scores_shape = tuple(batch) + (S, T)
    scores = b.index_map(red, tuple(var(DIM_NAMES[p]) for p in range(nb)) + (var(DIM_NAMES[nb]), const(0),
                         var(DIM_NAMES[nb + 1])), scores_shape, "scores")
    scores = b.elementwise("multiply", scores, scale, hint="scaled")
    if op.attr("is_causal", False):
        future = b.elementwise("greater", Axis(nb + 1), Axis(nb), hint="future", shape=scores_shape)
        scores = b.elementwise("where", future, float("-inf"), scores, hint="causal")
    if mask is not None:
        if b.type(mask).dtype == "bool":
            scores = b.elementwise("where", mask, scores, float("-inf"), hint="masked")
        else:
            scores = b.elementwise("add", scores, mask, hint="masked")
    _, e, ssum = softmax_parts(b, scores, nb + 1)
    probs = b.elementwise("divide", e, ssum, hint="probs")
    # out: (..., S, T, Dv) summed over T
    s_, t_, e_ = (var(DIM_NAMES[nb + i]) for i in range(3))
    shape = tuple(batch) + (S, T, Dv)
    p_bc = b.index_map(probs, tuple(var(DIM_NAMES[p]) for p in range(nb)) + (s_, t_), shape, f"{probs}_bc")
    v_bc = b.index_map(v, tuple(head_index(vs, nb)) + (t_, e_), shape, f"{v}_bc")
    pv = b.elementwise("multiply", p_bc, v_bc, hint="pv")
    red = b.reduce("sum", pv, (nb + 1,), hint="pv_sum")
    return b.index_map(red, tuple(var(DIM_NAMES[p]) for p in range(nb)) + (var(DIM_NAMES[nb]), const(0),
                       var(DIM_NAMES[nb + 1])), tuple(batch) + (S, Dv), "attn")
