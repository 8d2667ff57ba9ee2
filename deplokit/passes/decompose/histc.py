"""histc: a histogram of `bins` equal bins over [min, max], as a count (a reduction).

    bin[.., i]  = trunc((x[i] - min) * bins / (max - min)), the top edge in the last bin
    count[b]    = sum over i of where(min <= x[i] <= max and bin[i] == b, 1, 0)

torch's CPU formula; the count is exact (an integer sum) and the result keeps x's dtype.
MoE routing counts each expert's assignments this way (histc of the sorted expert ids)."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, var
from ...ir.tensor_ir import Axis
from .builder import Builder
from .registry import rule


@rule("histc")
def decompose_histc(op, b: Builder) -> str:
    x = op.args[0]
    bins, lo, hi = int(op.attr("bins", 100)), float(op.attr("min", 0)), float(op.attr("max", 0))
    if not lo < hi:
        raise UnsupportedOpError(f"histc (node {op.name}) with min >= max takes its range from the data; "
                                 "deplokit needs min < max given")
    if b.type(x).dtype != "float32":
        raise UnsupportedOpError(f"histc (node {op.name}) of {b.type(x).dtype}: torch counts floats only")
    n = 1
    for e in b.shape(x):
        n *= e
    flat = b.reshape(x, (n,), "histc_flat")
    grid = (bins, n)                                # (bin, element)
    xs = b.index_map(flat, (var(DIM_NAMES[1]),), grid, "histc_x")
    scaled = b.elementwise("divide", b.elementwise("multiply", b.elementwise("subtract", xs, lo, hint="histc_off"),
                                                   float(bins), hint="histc_scaled"), hi - lo, hint="histc_pos")
    where = b.elementwise("trunc", scaled, hint="histc_bin", dtype="int64")
    where = b.elementwise("minimum", where, bins - 1, hint="histc_top")     # x == max: the last bin
    inside = b.elementwise("logical_and", b.elementwise("greater_equal", xs, lo, hint="histc_ge"),
                           b.elementwise("less_equal", xs, hi, hint="histc_le"), hint="histc_in")
    hit = b.elementwise("logical_and", inside, b.elementwise("equal", where, Axis(0), hint="histc_eq"),
                        hint="histc_hit")
    one = b.elementwise("where", hit, 1, 0, hint="histc_one")
    count = b.reduce("sum", one, (1,), keepdim=False, hint="histc_count")
    return b.elementwise("multiply", count, 1.0, hint="histc")
