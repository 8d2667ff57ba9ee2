"""group_norm (instance_norm: a group per channel) and batch_norm, the norms over channel
axis 1: group_norm standardizes each group of C/G channels (with everything after them) of
each sample, then scales and shifts per channel; batch_norm in eval mode applies the running statistics, as torch does:
x * alpha + beta with alpha = weight / sqrt(var + eps), beta = bias - mean * alpha."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from .builder import Builder
from .layer_norm import standardize
from .registry import rule


def _per_channel(b: Builder, v: str, rank: int, hint: str) -> str:
    """A (C,) vector as (C, 1, ..., 1): one value per channel of an (N, C, ...) tensor."""
    return b.reshape(v, (b.shape(v)[0],) + (1,) * (rank - 2), hint)


@rule("group_norm")
def decompose_group_norm(op, b: Builder) -> str:
    x = op.args[0]
    shape = b.shape(x)
    n, c = shape[0], shape[1]
    groups = int(op.attr("num_groups", 0)) or c         # 0: instance_norm, a group per channel
    if c % groups:
        raise UnsupportedOpError(f"group_norm (node {op.name}): {c} channels in {groups} groups")
    rest = 1
    for e in shape[2:]:
        rest *= e
    grouped = b.reshape(x, (n, groups, c // groups * rest), "grouped")
    out = b.reshape(standardize(b, grouped, (2,), c // groups * rest, op.attr("eps", 1e-5)), shape, "group_normed")
    params = list(op.args[1:])
    if op.attr("has_weight", True) and params:
        out = b.elementwise("multiply", out, _per_channel(b, params.pop(0), len(shape), "gamma"), hint="scaled")
    if op.attr("has_bias", True) and params:
        out = b.elementwise("add", out, _per_channel(b, params.pop(0), len(shape), "beta"), hint="shifted")
    return out


@rule("batch_norm")
def decompose_batch_norm(op, b: Builder) -> str:
    if op.attr("training", False):
        raise UnsupportedOpError(f"batch_norm (node {op.name}) in training mode (batch statistics, running-stat "
                                 f"updates); deplokit compiles it in eval mode, from the running statistics")
    x, mean, var_ = op.args[:3]
    params = list(op.args[3:])
    rank = len(b.shape(x))
    alpha = b.elementwise("reciprocal", b.elementwise(
        "sqrt", b.elementwise("add", var_, float(op.attr("eps", 1e-5)), hint="var_eps"), hint="std"), hint="invstd")
    if op.attr("has_weight", True) and params:
        alpha = b.elementwise("multiply", params.pop(0), alpha, hint="alpha")
    beta = b.elementwise("neg", b.elementwise("multiply", mean, alpha, hint="mean_alpha"), hint="beta")
    if op.attr("has_bias", True) and params:
        beta = b.elementwise("subtract", params.pop(0), b.elementwise("multiply", mean, alpha), hint="beta")
    scaled = b.elementwise("multiply", x, _per_channel(b, alpha, rank, "alpha_c"), hint="bn_scaled")
    return b.elementwise("add", scaled, _per_channel(b, beta, rank, "beta_c"), hint="batch_norm")
