"""conv1d (N, C_in, L) * (C_out, C_in / groups, K) as index maps and a sum of products:

    window[n, co, l, j] = x[n, g(co) * C_in/groups + j // K, l * stride + (j % K) * dilation - padding]
                          (0 outside x: the zero padding is the index map's pad)
    out[n, co, l] = sum_j window[n, co, l, j] * w[co, j // K, j % K]  (+ bias[co])

With one group, the windows are the left operand of a matmul against w as (C_out, C_in K)
(matmul.contract), so the matmul schedules serve it; with several (depthwise: one channel a
group) each output channel sums its own C_in/groups x K products, a row reduction."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, const, floordiv, mod, var
from .builder import Builder
from .matmul import contract
from .registry import rule


def _axis(p: int, shape) -> object:
    """The output position along axis p (0 on a size-1 axis, as every index map writes it)."""
    return var(DIM_NAMES[p]) if shape[p] != 1 else const(0)


def _one(v, what: str) -> int:
    v = tuple(v) if isinstance(v, (list, tuple)) else (v,)
    if len(v) != 1 or not isinstance(v[0], int):
        raise UnsupportedOpError(f"conv1d: {what} {v} is not one integer")
    return v[0]


@rule("conv1d")
def decompose_conv1d(op, b: Builder) -> str:
    x, w = op.args[0], op.args[1]
    bias = op.args[2] if len(op.args) > 2 else None
    stride, dilation = _one(op.attr("stride", 1), "stride"), _one(op.attr("dilation", 1), "dilation")
    padding, groups = op.attr("padding", 0), op.attr("groups", 1)
    if padding in ("valid", "same"):   # "same": torch pads dilation (K - 1) // 2 on the left
        padding = 0 if padding == "valid" else dilation * (b.shape(w)[-1] - 1) // 2
    padding = _one(padding, "padding")
    unbatched = len(b.shape(x)) == 2
    if unbatched:
        x = b.reshape(x, (1,) + b.shape(x), f"{x}_batch")
    n, c_in, length = b.shape(x)
    c_out, c_group, k = b.shape(w)
    l_out = op.type.shape[-1]
    per_group = c_out // groups
    ck = c_group * k
    if groups == 1:
        # windows (N, L_out, C_in K) @ w (C_out, C_in K)^T -> (N, L_out, C_out)
        shape = (n, l_out, ck)
        ranges = dict(zip(DIM_NAMES, shape))
        j = _axis(2, shape)
        index = (_axis(0, shape), floordiv(j, k, ranges) if c_in != 1 else const(0),
                 _axis(1, shape) * stride + mod(j, k, ranges) * dilation - padding)
        windows = b.index_map(x, index, shape, "window", pad=0.0)
        flat_w = b.reshape(w, (c_out, ck), f"{w}_flat")
        out = b.permute(contract(b, windows, flat_w, rhs_transposed=True), (0, 2, 1), "conv")
    else:
        shape = (n, c_out, l_out, ck)
        ranges = dict(zip(DIM_NAMES, shape))
        co, j = _axis(1, shape), _axis(3, shape)
        channel = floordiv(co, per_group, ranges) * c_group + (floordiv(j, k, ranges) if c_group != 1 else const(0))
        index = (_axis(0, shape), channel, _axis(2, shape) * stride + mod(j, k, ranges) * dilation - padding)
        windows = b.index_map(x, index, shape, "window", pad=0.0)
        flat_w = b.reshape(w, (c_out, ck), f"{w}_flat")
        taps = b.index_map(flat_w, (co, j), shape, f"{w}_taps")
        prod = b.elementwise("multiply", windows, taps, hint="tap")
        out = b.reduce("sum", prod, (3,), keepdim=False, hint="conv")
    if bias is not None:
        out = b.elementwise("add", out, b.reshape(bias, (c_out, 1), f"{bias}_col"), hint="conv_bias")
    return b.reshape(out, op.type.shape, "conv_out") if unbatched else out
