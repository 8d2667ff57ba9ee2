"""grouped_mm (transformers' grouped_mm_fallback): rows sorted by expert, one matmul per
expert over its run of rows, given the runs' ends `offs` (cumulative counts). docs/moe.md.

Expert-aligned tiles, where `offs` is a running count (a cumsum of histc: the runs are
disjoint and in order, as every MoE router makes them). Each expert's run is cut into tiles
of T rows; the tiles of all experts are numbered in one list of P slots, at most
S / T + E of them (each expert adds at most one partial tile):

    start[e], end[e] = offs[e-1], offs[e]                       each expert's run of rows
    tiles[e]   = (end[e] - start[e] + T - 1) // T                its tiles (0: no rows)
    first[e]   = cumsum(tiles)[e] - tiles[e]                      its first slot
    expert[p]  = min(sum over e of (cumsum(tiles)[e] <= p), E-1)  the expert slot p serves
    base[p]    = min(start[e] + (p - first[e]) * T, S - T)        its first row (in range)
    out_t[p, i, n] = sum over k of x[base[p] + i, k] * w[expert[p], k, n]

a batched matmul whose batch axis selects the weights through a gather: fusion gives that
axis the role G (one slot per block, fuse/build.py), so each block serves one expert's
rows and stages its weights once per tile (007: a block-uniform gather is a box's origin).
A tile at a run's end takes rows of the next run (base is clamped so that none falls past
S), and slots past the last tile serve the last expert: their rows are computed and never
read. Each row then reads its result back:

    owner[r]   = max over e of where(start[e] <= r < end[e], e, -1)    (the run row r is in)
    d          = r - start[owner];  at[r] = (first[owner] + d // T) * T + max(d % T, r - (S - T))
    out[r, n]  = out_t[at // T, at % T, n], 0 where no run holds r    (as the fallback leaves it)

Other `offs` (an input: runs may overlap) take the row path: each row's product reads its
own expert's weights through a gather, `w[owner[r], k, n]`; the fallback's loop gives a
later run the rows an earlier one wrote, and the max does the same."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.index import DIM_NAMES, Gather, as_affine, floordiv, mod, var
from ...ir.tensor_ir import TF32_OP, Axis
from .builder import Builder
from .cumsum import scan
from .registry import rule

MIN_TILE, MAX_TILE = 16, 64      # rows per expert tile: a block's M tile (005/008's 16..64)
COUNTS = ("histc",)              # Torch-IR ops whose values are counts (never negative)
CASTS = ("to", "clone", "contiguous", "alias")


def expert_tile(rows: int, experts: int) -> int:
    """T: the power of two at or above an expert's mean run (rows / experts), within
    MIN_TILE..MAX_TILE and at most the rows. Mean runs shorter than T pad every tile; longer
    tiles would read each expert's weights fewer times but pad the runs' ends more."""
    t = MIN_TILE
    while t < MAX_TILE and t * experts < rows:
        t *= 2
    return min(t, rows)


def note_counts(op, args: tuple, result: str, b: Builder) -> None:
    """Record on the builder what the expert-aligned path needs proven: `result` holds counts
    (histc, or a cast of counts), or a running count (a 1-d cumsum of counts: ends of
    disjoint runs in order)."""
    if op.op in COUNTS or (op.op in CASTS and args and args[0] in b.counts):
        b.counts.add(result)
    elif op.op == "cumsum" and args and args[0] in b.counts and len(b.shape(result)) == 1:
        b.running_counts.add(result)


@rule("grouped_mm")
def decompose_grouped_mm(op, b: Builder) -> str:
    x, w, offs = op.args
    (rows, depth), (experts, depth2, cols) = b.shape(x), b.shape(w)
    if len(b.shape(offs)) != 1 or b.shape(offs)[0] != experts or depth != depth2:
        raise UnsupportedOpError(f"grouped_mm (node {op.name}): x {b.shape(x)}, w {b.shape(w)}, offs "
                                 f"{b.shape(offs)}; deplokit takes x (S, K), w (E, K, N), offs (E,)")
    owner = _owner(b, offs, rows, experts)
    if offs in b.running_counts:
        red = _expert_tiles(b, x, w, offs, owner, rows, experts)
    else:
        red = _row_products(b, x, w, owner, rows, depth, cols)
    held = b.elementwise("greater_equal", owner, 0, hint="gmm_held")
    held_bc = b.index_map(held, (var(DIM_NAMES[0]),), (rows, cols), "gmm_held_bc")
    return b.elementwise("where", held_bc, red, 0.0, hint="grouped_mm")


def _owner(b: Builder, offs: str, rows: int, experts: int) -> str:
    """owner[r]: the last run that holds row r, -1 for none (shared by the grouped matmuls
    of one layer, which read the same offs)."""
    key = ("gmm_owner", offs, rows)
    if key not in b.shared:
        grid = (rows, experts)                              # (row, expert)
        end = b.index_map(offs, (var(DIM_NAMES[1]),), grid, "gmm_end")
        start = b.index_map(offs, (var(DIM_NAMES[1]) - 1,), grid, "gmm_start", pad=0)
        inside = b.elementwise("logical_and", b.elementwise("less_equal", start, Axis(0), hint="gmm_after"),
                               b.elementwise("less", Axis(0), end, hint="gmm_before"), hint="gmm_in")
        which = b.elementwise("where", inside, Axis(1), -1, hint="gmm_which", dtype="int64")
        b.shared[key] = b.reduce("max", which, (1,), keepdim=False, hint="gmm_owner")
    return b.shared[key]


def _row_products(b: Builder, x: str, w: str, owner: str, rows: int, depth: int, cols: int) -> str:
    expert = b.elementwise("maximum", owner, 0, hint="gmm_expert")
    shape = (rows, depth, cols)
    r, k, n = (var(DIM_NAMES[q]) for q in range(3))
    a_bc = b.index_map(x, (r, k), shape, f"{x}_bc")
    w_bc = b.index_map(w, (as_affine(Gather(expert, (r,))), k, n), shape, f"{w}_bc")
    prod = b.elementwise("multiply", a_bc, w_bc, hint="gmm_prod")
    return b.reduce("sum", prod, (1,), keepdim=False, hint="gmm_red")


def _expert_tiles(b: Builder, x: str, w: str, offs: str, owner: str, rows: int, experts: int) -> str:
    layout = _layout(b, offs, owner, rows, experts)
    t, slots = layout["tile"], layout["slots"]
    (depth, cols), (p, i, k, n) = b.shape(w)[1:], (var(DIM_NAMES[q]) for q in range(4))
    if b.precision == "tf32":     # each operand rounded once, as matmul.contract does
        x, w = (b.elementwise(TF32_OP, v, hint=f"{v}_tf32") for v in (x, w))
    base, expert = as_affine(Gather(layout["base"], (p,))), as_affine(Gather(layout["expert"], (p,)))
    shape = (slots, t, depth, cols)
    xt = b.index_map(x, (base + i, k), shape, "gmm_rows")            # the slot's T rows
    wt = b.index_map(w, (expert, k, n), shape, "gmm_weights")        # its expert's weights
    prod = b.elementwise("multiply", xt, wt, hint="gmm_prod")
    tiles = b.reduce("sum", prod, (2,), keepdim=False, hint="gmm_tiles")     # (P, T, N)
    at = as_affine(Gather(layout["at"], (var(DIM_NAMES[0]),)))
    ranges = {DIM_NAMES[0]: rows}
    return b.index_map(tiles, (floordiv(at, t, ranges), mod(at, t, ranges), var(DIM_NAMES[1])), (rows, cols),
                       "gmm_back")


def _layout(b: Builder, offs: str, owner: str, rows: int, experts: int) -> dict:
    """The tile list of runs `offs` (the module's start .. lane; `at` = slot * T + lane),
    once per offs. Each value reads offs, the tile scan and the owners through index maps
    (padded at expert -1: row 0, slot 0), so fusion stores only what is read as an index."""
    key = ("gmm_layout", offs, rows)
    if key in b.shared:
        return b.shared[key]
    t = expert_tile(rows, experts)
    slots = (rows + experts * (t - 1)) // t        # sum of ceil(run / T) over the runs, at most
    i = var(DIM_NAMES[0])
    start = b.index_map(offs, (i - 1,), (experts,), "gmm_run_start", pad=0)
    count = b.elementwise("floor_divide", b.elementwise("add", b.elementwise("subtract", offs, start, hint="gmm_run"),
                                                        t - 1, hint="gmm_run_up"), t, hint="gmm_run_tiles")
    last = scan(b, count, 0, "gmm_tiles_end")                       # slots up to and including e's

    def before(value: str, which: str, n: int, hint: str) -> str:  # value[which[i] - 1], 0 at -1
        return b.index_map(value, (as_affine(Gather(which, (i,))) - 1,), (n,), hint, pad=0)
    # expert[p]: how many experts' tiles all lie before slot p (the last expert past them all)
    last_bc = b.index_map(last, (var(DIM_NAMES[1]),), (slots, experts), "gmm_last_bc")
    done = b.elementwise("less_equal", last_bc, Axis(0), hint="gmm_done")
    count_done = b.reduce("sum", b.elementwise("where", done, 1, 0, hint="gmm_done_one", dtype="int64"), (1,),
                          keepdim=False, hint="gmm_done_n")
    expert = b.elementwise("minimum", count_done, experts - 1, hint="gmm_slot_expert")
    offset = b.elementwise("multiply", b.elementwise("subtract", Axis(0), before(last, expert, slots, "gmm_slot_first"),
                                                     hint="gmm_slot_j"), t, hint="gmm_slot_off")
    row = b.elementwise("add", before(offs, expert, slots, "gmm_slot_start"), offset, hint="gmm_slot_row")
    base = b.elementwise("minimum", b.elementwise("maximum", row, 0, hint="gmm_slot_lo"), rows - t,
                         hint="gmm_slot_base")
    # each row's place in the tiles: slot first[e] + d // T, lane d % T (d = r - start[e]),
    # or further in where base was clamped to S - T: at = slot * T + max(d % T, r - (S - T))
    d = b.elementwise("subtract", Axis(0), before(offs, owner, rows, "gmm_row_start"), hint="gmm_row_in")
    lane = b.elementwise("remainder", d, t, hint="gmm_row_lane_run")
    slot = b.elementwise("add", before(last, owner, rows, "gmm_row_first"),
                         b.elementwise("floor_divide", d, t, hint="gmm_row_tile"), hint="gmm_row_slot")
    past = b.elementwise("subtract", Axis(0), rows - t, hint="gmm_row_past", shape=(rows,), dtype="int64")
    at = b.elementwise("add", b.elementwise("multiply", slot, t, hint="gmm_row_slot_t"),
                       b.elementwise("maximum", lane, past, hint="gmm_row_lane"), hint="gmm_row_at_raw")
    at = b.elementwise("minimum", b.elementwise("maximum", at, 0, hint="gmm_row_at_lo"), slots * t - 1,
                       hint="gmm_row_at")      # rows no run holds: any slot (masked after)
    b.shared[key] = dict(tile=t, slots=slots, base=base, expert=expert, at=at)
    return b.shared[key]
