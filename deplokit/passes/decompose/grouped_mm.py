"""grouped_mm (transformers' grouped_mm_fallback): rows sorted by expert, one matmul per
expert over its run of rows, given the runs' ends `offs` (cumulative counts).

    owner[r]   = max over e of where(offs[e-1] <= r < offs[e], e, -1)   (the run row r is in)
    out[r, n]  = sum over k of x[r, k] * w[owner[r], k, n]             (w read through a gather)
    out[r, :]  = 0 where no run holds r                                (as the fallback leaves it)

owner is the expert grouping as an index map: each row's matmul reads its own expert's
weights, so the contraction is matmul's (multiply, sum over K) with a gathered right operand.
The fallback's loop gives a later run the rows an earlier one wrote; the max does the same."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, Gather, as_affine, var
from ...ir.tensor_ir import Axis
from .builder import Builder
from .registry import rule


@rule("grouped_mm")
def decompose_grouped_mm(op, b: Builder) -> str:
    x, w, offs = op.args
    (rows, depth), (experts, depth2, cols) = b.shape(x), b.shape(w)
    if len(b.shape(offs)) != 1 or b.shape(offs)[0] != experts or depth != depth2:
        raise UnsupportedOpError(f"grouped_mm (node {op.name}): x {b.shape(x)}, w {b.shape(w)}, offs "
                                 f"{b.shape(offs)}; deplokit takes x (S, K), w (E, K, N), offs (E,)")
    grid = (rows, experts)                              # (row, expert)
    end = b.index_map(offs, (var(DIM_NAMES[1]),), grid, "gmm_end")
    start = b.index_map(offs, (var(DIM_NAMES[1]) - 1,), grid, "gmm_start", pad=0)
    inside = b.elementwise("logical_and", b.elementwise("less_equal", start, Axis(0), hint="gmm_after"),
                           b.elementwise("less", Axis(0), end, hint="gmm_before"), hint="gmm_in")
    which = b.elementwise("where", inside, Axis(1), -1, hint="gmm_which", dtype="int64")
    owner = b.reduce("max", which, (1,), keepdim=False, hint="gmm_owner")
    expert = b.elementwise("maximum", owner, 0, hint="gmm_expert")
    shape = (rows, depth, cols)
    r, k, n = (var(DIM_NAMES[q]) for q in range(3))
    a_bc = b.index_map(x, (r, k), shape, f"{x}_bc")
    w_bc = b.index_map(w, (as_affine(Gather(expert, (r,))), k, n), shape, f"{w}_bc")
    prod = b.elementwise("multiply", a_bc, w_bc, hint="gmm_prod")
    red = b.reduce("sum", prod, (1,), keepdim=False, hint="gmm_red")
    held = b.elementwise("greater_equal", owner, 0, hint="gmm_held")
    held_bc = b.index_map(held, (r,), (rows, cols), "gmm_held_bc")
    return b.elementwise("where", held_bc, red, 0.0, hint="grouped_mm")
