"""Flash attention's Loop IR: one pass over the keys, the softmax computed online.

Row fusion keeps a row of T scores and a row of T probabilities on chip, and reads the keys
three times (max, sum, probabilities). Online softmax reads them once: it keeps, per query
row, the running max m, the running sum l of exp(x - m) and the running output row
o = sum of exp(x - m) * v, and when a key raises the max it rescales l and o by
exp(m_old - m_new). After the last key, out = o / l.

    for a0 in 0..H:  # free
        for a1 in 0..S:  # free
            row_max[a0, a1] = -inf
            row_sum[a0, a1] = 0
            for a2 in 0..Dv:  # free
                row_out[a0, a1, a2] = 0
            for a3 in 0..T:  # serial
                (x = the score of key a3: dot product, scale, mask)
                m_old = load row_max;  m = max(m_old, x)
                base = where(m == -inf, 0, m)      # a row that saw only masked keys stays finite
                c = exp(m_old - base);  p = exp(x - base)
                row_sum = row_sum * c + p;  row_max = m
                for a4 in 0..Dv:  # free
                    row_out[..., a4] = row_out[..., a4] * c + p * v[a3, a4]
            for a5 in 0..Dv:  # free
                out[..., a5] = load row_out[..., a5] / load row_sum

The key loop is `serial`: each iteration reads what the previous one stored. The three
running values are the kernel's locals (a row of Dv floats and two scalars per query row);
the Tile IR keeps them in registers (flash/flash_tile.py). A fully masked row ends with
o = 0 and l = 0: 0 / 0 = NaN, as eager's softmax of a row of -inf; where the source zeroes
such rows (sdpa with a bool mask), the same test of the max zeroes the output row.
"""
from __future__ import annotations

import dataclasses

from ...ir.index import Affine, substitute, var
from ...ir.loop_ir import Compute, Kernel, Load, LocalBuffer, Loop, Store
from ...ir.names import fresh_name
from ...ir.types import TensorType
from ..rows.rows import renumber
from .attention_match import AttentionParts, rename_var


def flash_kernel(parts: AttentionParts, name: str, outputs: tuple[str, ...], taken: set[str],
                 partial: tuple[str, str, str] | None = None) -> Kernel:
    """The online-softmax kernel for the attention in `parts` (names in `taken` avoided).
    `partial` (flash-decoding's split kernel, attention_split.py): instead of out = o / l, the
    running max, sum (one a row) and output row are stored into those three tensors."""
    rows = parts.rows
    row_index = tuple(var(lp.var) for lp in rows)
    shape = tuple(lp.extent for lp in rows)
    r = len(rows)
    m_name, l_name, o_name = (fresh_name(b, taken) for b in ("row_max", "row_sum", "row_out"))
    locals_ = (LocalBuffer(m_name, TensorType(shape + (1,)), ()),
               LocalBuffer(l_name, TensorType(shape + (1,)), ()),
               LocalBuffer(o_name, TensorType(shape + (parts.columns,)), (r,)))
    at = row_index + (Affine(),)
    col = "%col"
    o_at = row_index + (var(col),)
    key = parts.key
    x = parts.x
    step = list(parts.score) + [
        Load("%m_old", m_name, at),
        Compute("%m", "maximum", ("%m_old", x), "the running max"),
        Compute("%unseen", "equal", ("%m", float("-inf")), dtype="bool"),
        Compute("%base", "where", ("%unseen", 0.0, "%m"), "a row of masked keys keeps exp finite"),
        Compute("%c_d", "subtract", ("%m_old", "%base")),
        Compute("%c", "exp", ("%c_d",), "rescales what was summed under the old max"),
        Compute("%p_d", "subtract", (x, "%base")),
        Compute("%p", "exp", ("%p_d",)),
        Load("%l_old", l_name, at),
        Compute("%l_c", "multiply", ("%l_old", "%c")),
        Compute("%l", "add", ("%l_c", "%p")),
        Store(l_name, at, "%l"),
        Store(m_name, at, "%m"),
        Loop(col, parts.columns, "free", (
            Load("%o_old", o_name, o_at),
            *((Load("%v", parts.value.tensor, _at_column(parts.value.index, parts.column, col)),)
              if parts.widen is None else
              (Load("%v_h", parts.value.tensor, _at_column(parts.value.index, parts.column, col)),
               dataclasses.replace(parts.widen, dst="%v", args=("%v_h",)))),
            Compute("%o_c", "multiply", ("%o_old", "%c")),
            Compute("%pv", "multiply", ("%p", "%v")),
            Compute("%o", "add", ("%o_c", "%pv")),
            Store(o_name, o_at, "%o"))),
    ]
    if partial is not None:
        return Kernel(name, outputs, renumber(_rows(rows, row_body_partial(
            rows, row_index, parts, step, m_name, l_name, o_name, partial))), locals_)
    # after the keys: the row's tests of the max read its final value, then out = o / l
    finish: list = [Load(parts.running_max, m_name, at)] if parts.zero_if else []
    finish.append(Load("%l_end", l_name, at))
    finish += list(parts.zero_if)
    out_col = "%outcol"
    o_end = row_index + (var(out_col),)
    last = [Load("%o_end", o_name, o_end), Compute(parts.acc, "divide", ("%o_end", "%l_end"))]
    if parts.zero_cond:
        last[-1] = Compute("%o_div", "divide", ("%o_end", "%l_end"))
        last.append(Compute(parts.acc, "where", (parts.zero_cond, 0.0, "%o_div"), "the source zeroes a masked row"))
    last += list(parts.epilogue) + [parts.store]
    tail = rename_var(tuple(last), parts.column, out_col)
    row_body = (*parts.prologue, Store(m_name, at, float("-inf")), Store(l_name, at, 0.0),
                Loop("%initcol", parts.columns, "free", (Store(o_name, row_index + (var("%initcol"),), 0.0),)),
                Loop(key, parts.keys, "serial", tuple(step)),
                *finish,
                Loop(out_col, parts.columns, "free", tail))
    return Kernel(name, outputs, renumber(_rows(rows, row_body)), locals_)


def _rows(rows, body) -> tuple:
    for lp in reversed(rows):
        body = (Loop(lp.var, lp.extent, "free", body),)
    return body


def row_body_partial(rows, row_index, parts: AttentionParts, step, m_name, l_name, o_name, partial) -> tuple:
    """The split kernel's row: the online softmax over its keys, then the running max, sum
    (a row's) and output row stored unnormalised for the combine (a split of masked keys stores -inf,
    0 and a row of zeros: the combine weighs it exp(-inf) = 0)."""
    at = row_index + (Affine(),)
    col = "%outcol"
    o_at = row_index + (var(col),)
    out_max, out_sum, out_row = partial
    return (*parts.prologue, Store(m_name, at, float("-inf")), Store(l_name, at, 0.0),
            Loop("%initcol", parts.columns, "free", (Store(o_name, row_index + (var("%initcol"),), 0.0),)),
            Loop(parts.key, parts.keys, "serial", tuple(step)),
            Load("%m_end", m_name, at),
            Load("%l_end", l_name, at),
            Store(out_max, row_index, "%m_end"),
            Store(out_sum, row_index, "%l_end"),
            Loop(col, parts.columns, "free", (
                Load("%o_end", o_name, o_at),
                Store(out_row, o_at, "%o_end"))))


def _at_column(index, old: str, new: str):
    return tuple(substitute(e, {old: var(new)}) for e in index)
