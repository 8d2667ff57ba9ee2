"""Where a staged slab lives in shared memory: its size (rows padded by Stage.pad) and the
element a load from it reads (plus the current buffer's base when double buffered; a swizzled
TMA box's reads apply its XOR within the buffer)."""
from __future__ import annotations

import dataclasses

from . import kernel_ir as K
from .stages import buffer_floats, row_major_strides
from .swizzle import swizzle_word
from .tile_ir import Stage
from .types import DTYPE_CTYPE, HALF_DTYPES, shared_ctype


@dataclasses.dataclass(frozen=True)
class PlacedStage(Stage):
    """A Stage as the materialiser placed it: `base` is the element offset of the buffer the
    current iteration reads (double buffering), None for a single buffer."""
    base: object = None

    @classmethod
    def of(cls, stage: Stage, base) -> "PlacedStage":
        return cls(**{f.name: getattr(stage, f.name) for f in dataclasses.fields(Stage)}, base=base)


def smem_size(s: Stage) -> int:
    """Elements of one buffer of the stage (floats, or halves for a half stage)."""
    return buffer_floats(s)


def stage_value_dtype(s: Stage, tensor_dtype: str) -> str:
    """The dtype of the values a stage holds: its prologue's where it has one (007's staged
    prologues are float32 chains: an int64 sum's .float() + x is no int64), else the tensor's."""
    return "float32" if s.prologue is not None else tensor_dtype


def stage_ctype(s: Stage, tensor_dtype: str) -> str:
    """The element type of the stage's shared array: its half type where it holds the tensor's
    halves raw (008's tensor-core operands), else shared_ctype's of the values it holds."""
    if s.dtype in HALF_DTYPES:
        return DTYPE_CTYPE[s.dtype]
    return shared_ctype(stage_value_dtype(s, tensor_dtype))


def _sum(terms) -> K.Expr:
    out = None
    for e, st in terms:
        if isinstance(e, K.Const) and e.value == 0:
            continue
        t = e if st == 1 else K.Binary("*", e, K.Const(st, "int"))
        out = t if out is None else K.Binary("+", out, t)
    return K.Const(0, "int") if out is None else out


def _div(e: K.Expr, w: K.Const) -> K.Expr:
    return K.Const(int(e.value) // int(w.value), "int") if isinstance(e, K.Const) else K.Binary("/", e, w)


def _mod(e: K.Expr, w: K.Const) -> K.Expr:
    return K.Const(int(e.value) % int(w.value), "int") if isinstance(e, K.Const) else K.Binary("%", e, w)


def swizzled(row: K.Expr, col: K.Expr, span: int) -> K.Expr:
    """Where a TMA box written with a `span`-byte swizzle holds float `row + col` of its
    rows of span / 4 floats (`row` a multiple of the row length, 0 <= col < span / 4):
    deplokit.ir.swizzle.swizzle_word, spelled so that the XOR reads the row alone and moves
    col's 16-byte chunk, col's float within it added last. Four consecutive floats of a
    chunk then sit at one base plus 0..3, which nvcc still merges into one LDS.128."""
    if isinstance(row, K.Const) and isinstance(col, K.Const):
        return K.Const(int(swizzle_word(int(row.value) + int(col.value), span)), "int")
    shift = K.Binary("<<", K.Binary("&", K.Binary(">>", row, K.Const(5, "int")), K.Const(span // 16 - 1, "int")),
                     K.Const(2, "int"))
    chunk = K.Binary("^", K.Binary("&", col, K.Const(-4, "int")), shift)
    return K.Binary("+", K.Binary("+", row, chunk), K.Binary("&", col, K.Const(3, "int")))


def smem_offset(exprs, s: Stage) -> K.Expr:
    """The shared-memory element of slab index `exprs` (one expression per slab axis),
    XOR-swizzled where the stage is a swizzled TMA box (012). Two axes of one dimension
    indexed (x / A, x % A) fold back to x where the layout allows (no pad between them)."""
    shape = [ax.extent for ax in s.slab]
    shape[-1] += s.pad
    split = s.tma.boxes > 1 if s.tma else False
    if split:                         # boxes side by side along the rows: each one box[-1] wide
        shape[-1] = s.tma.box[-1]
    strides = row_major_strides(shape)
    terms = []
    k = 0
    while k < len(exprs):
        e = exprs[k]
        if (
            k + 1 < len(exprs)
            and s.slab[k].dim == s.slab[k + 1].dim
            and strides[k] == strides[k + 1] * s.slab[k + 1].extent
        ):
            a, b = e, exprs[k + 1]
            if (isinstance(a, K.Binary) and a.op == "/" and isinstance(b, K.Binary) and b.op == "%"
                    and a.a == b.a and a.b == b.b == K.Const(s.slab[k + 1].extent, "int")):
                terms.append((a.a, strides[k + 1]))
                k += 2
                continue
        terms.append((e, strides[k]))
        k += 1
    box_term = []
    if split:                         # column c is column c % w of box c / w
        col, w = terms[-1][0], K.Const(s.tma.box[-1], "int")
        box_term = [(_div(col, w), s.tma.elements)]
        terms[-1] = (_mod(col, w), 1)
    if s.tma and s.tma.swizzle:       # a box's rows are one span: the last axis is the column
        out = swizzled(_sum(terms[:-1]), terms[-1][0], s.tma.swizzle)
    else:
        out = _sum(terms)
    lead = _sum(box_term)
    if lead != K.Const(0, "int"):
        out = K.Binary("+", lead, out)
    base = getattr(s, "base", None)
    return out if base is None else K.Binary("+", base, out)
