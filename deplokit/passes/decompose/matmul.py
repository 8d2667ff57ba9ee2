"""matmul / mm / bmm: broadcast both operands to (..., M, K, N), multiply, sum over K.

    a_bc = a[i, j] -> (M, K, N);  b_bc = b[j, k] -> (M, K, N)
    prod = multiply(a_bc, b_bc);  red = sum(prod, axis=-2) -> (M, 1, N);  out = red[i, na, j]
"""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, const, var
from ...ir.tensor_ir import TF32_OP
from .builder import Builder, broadcast_shapes
from .registry import rule


def contract(b: Builder, lhs: str, rhs: str, rhs_transposed: bool = False) -> str:
    """lhs (..., M, K) @ rhs (..., K, N), or rhs (N, K) when rhs_transposed. Returns (..., M, N)."""
    ls, rs = b.shape(lhs), b.shape(rhs)
    if not ls or not rs:
        raise UnsupportedOpError("matmul of a 0-d tensor is not supported")
    squeeze_m = len(ls) == 1
    squeeze_n = len(rs) == 1
    if squeeze_m:
        ls = (1,) + ls
    if squeeze_n:
        rs = rs + (1,) if not rhs_transposed else (1,) + rs
    M, K = ls[-2], ls[-1]
    if rhs_transposed:
        N, K2 = rs[-2], rs[-1]
    else:
        K2, N = rs[-2], rs[-1]
    if K != K2:
        raise UnsupportedOpError(f"matmul: inner dimensions differ ({K} vs {K2}) for {lhs} and {rhs}")
    batch = broadcast_shapes(ls[:-2], rs[:-2])
    nb = len(batch)
    prod_shape = batch + (M, K, N)
    m, k, n = var(DIM_NAMES[nb]), var(DIM_NAMES[nb + 1]), var(DIM_NAMES[nb + 2])

    def batch_index(shape):
        lead = nb - len(shape)
        return [var(DIM_NAMES[p + lead]) if e != 1 else const(0) for p, e in enumerate(shape)]

    l_true, r_true = b.shape(lhs), b.shape(rhs)
    l_index = batch_index(ls[:-2]) + ([] if squeeze_m else [m if M != 1 else const(0)]) + [k]
    if rhs_transposed:
        r_index = batch_index(rs[:-2]) + ([] if squeeze_n else [n if N != 1 else const(0)]) + [k]
    else:
        r_index = batch_index(rs[:-2]) + [k] + ([] if squeeze_n else [n if N != 1 else const(0)])
    assert len(l_index) == len(l_true) and len(r_index) == len(r_true)
    if b.precision == "tf32":     # each operand rounded once, as mma.sync's tf32 inputs are
        lhs = b.elementwise(TF32_OP, lhs, hint=f"{lhs}_tf32")
        rhs = b.elementwise(TF32_OP, rhs, hint=f"{rhs}_tf32")
    a_bc = b.index_map(lhs, tuple(l_index), prod_shape, f"{lhs}_bc")
    b_bc = b.index_map(rhs, tuple(r_index), prod_shape, f"{rhs}_bc")
    prod = b.elementwise("multiply", a_bc, b_bc, hint="prod")
    red = b.reduce("sum", prod, (nb + 1,), keepdim=True, hint="red")
    out_index = [var(DIM_NAMES[d]) for d in range(nb)]
    out_shape = list(batch)
    out_index.append(const(0) if squeeze_m else var(DIM_NAMES[nb]))
    if not squeeze_m:
        out_shape.append(M)
    out_index.append(const(0))
    q = nb + (0 if squeeze_m else 1)
    out_index.append(const(0) if squeeze_n else var(DIM_NAMES[q]))
    if not squeeze_n:
        out_shape.append(N)
    # size-1 extents index with 0
    red_shape = b.shape(red)
    out_index = [const(0) if red_shape[p] == 1 else e for p, e in enumerate(out_index)]
    return b.index_map(red, tuple(out_index), tuple(out_shape), "mm")


@rule("matmul", "mm", "bmm")
def decompose_matmul(op, b: Builder) -> str:
    return contract(b, op.args[0], op.args[1])
