"""Flash-decoding: one query row's keys split into blocks that run in parallel, then a combine.

With one token (decode), flash attention has one block per kv head (3 on SmolLM2) for the
whole key range: most SMs idle. When its plan splits the keys (attention_plan.py: `splits`,
chosen while the blocks are fewer than the SMs), fuse_attention emits two kernels:

    split kernel (a row loop more, the split s):
        for s in 0..S:  # free                      keys s * C .. s * C + C - 1
            online softmax over those C keys (as attention_loop.py)
            part_max[.., s, col] = m;  part_sum[.., s, col] = l;  part_out[.., s, col] = o
    combine kernel (every output element, the splits in order, no atomics):
        M = max_s part_max[.., s, col];  base = where(M == -inf, 0, M)
        L = sum_s exp(part_max - base) * part_sum;  O = sum_s exp(part_max - base) * part_out
        out = O / L   (then the source's own epilogue: a fully masked row zeroed, casts)

The combine is the online softmax's own rescale, once per split: the same formulas, in split
order. The partials cost 2 x (Dv + 2) floats a row and split, written then read: small next to
the keys and values once the cache is long, and what buys the blocks.
"""
from __future__ import annotations

import dataclasses

from ...ir.index import Affine, Gather, Var, as_affine, const, var
from ...ir.loop_ir import Accumulate, Compute, Kernel, Load, Loop, flash_parts, walk
from ...ir.names import fresh_name
from ...ir.substitute import substitute_body
from ...ir.types import Buffer, TensorType
from ..rows.rows import renumber
from .attention_loop import flash_kernel
from .attention_match import AttentionParts

SPLIT = "%split"


def split_names(last_output: str, taken: set[str]) -> tuple[str, str, str]:
    """The three partial tensors' names (running max, running sum, output rows)."""
    names = tuple(fresh_name(f"{last_output}_{what}", taken) for what in ("split_max", "split_sum", "split_out"))
    taken.update(names)
    return names


def split_kernels(parts: AttentionParts, name: str, outputs: tuple[str, ...], taken: set[str],
                  splits: int, scalars: frozenset[str] = frozenset()) -> tuple[Kernel, Kernel, tuple[Buffer, ...]]:
    """(split kernel, combine kernel, the partial tensors as temp buffers) for `splits` key
    ranges of parts.keys // splits keys each. With the mask a bound on the keys by a runtime
    scalar (one of `scalars`), the split's key loop stops there (bounded)."""
    chunk = parts.keys // splits
    partial = split_names(outputs[0], taken)
    split = Loop(SPLIT, splits, "free", ())
    at_key = {parts.key: var(SPLIT) * chunk + var(parts.key)}
    ranges = {parts.key: chunk, SPLIT: splits}
    value = dataclasses.replace(parts.value, index=substitute_body((parts.value,), at_key, ranges)[0].index)
    split_parts = dataclasses.replace(parts, rows=parts.rows + (split,), keys=chunk,
                                      score=substitute_body(parts.score, at_key, ranges), value=value)
    first = flash_kernel(split_parts, f"{name}_split", partial, taken, partial=partial)
    first = bounded(first, scalars)
    shape = tuple(lp.extent for lp in parts.rows) + (splits,)
    buffers = (Buffer(partial[0], TensorType(shape)), Buffer(partial[1], TensorType(shape)),
               Buffer(partial[2], TensorType(shape + (parts.columns,))))
    buffers = tuple(dataclasses.replace(b, kind="temp") for b in buffers)
    return first, combine_kernel(parts, f"{name}_combine", outputs, splits, partial), buffers


def combine_kernel(parts: AttentionParts, name: str, outputs: tuple[str, ...], splits: int,
                   partial: tuple[str, str, str]) -> Kernel:
    """Every output element from its column's partials, the splits in order."""
    out_max, out_sum, out_row = partial
    rows = parts.rows
    col = parts.column
    row_index = tuple(var(lp.var) for lp in rows)
    big = parts.running_max if parts.zero_if else "%m_all"

    def at(s, column=True):
        return row_index + ((var(s), var(col)) if column else (var(s),))

    def weighted(s, tensor, acc):
        return Loop(s, splits, "reduce", (
            Load(f"{s}_m", out_max, at(s, False)),
            Load(f"{s}_x", tensor, at(s, tensor == out_row)),
            Compute(f"{s}_wd", "subtract", (f"{s}_m", "%base")),
            Compute(f"{s}_w", "exp", (f"{s}_wd",), "the split's rescale to the common max"),
            Compute(f"{s}_wx", "multiply", (f"{s}_w", f"{s}_x")),
            Accumulate(acc, "sum", f"{s}_wx")))

    body = [Loop("%s_max", splits, "reduce",
                 (Load("%m_s", out_max, at("%s_max", False)), Accumulate(big, "max", "%m_s"))),
            Compute("%unseen", "equal", (big, float("-inf")), dtype="bool"),
            Compute("%base", "where", ("%unseen", 0.0, big), "a row of masked keys keeps exp finite"),
            weighted("%s_sum", out_sum, "%l_all"),
            weighted("%s_out", out_row, "%o_all")]
    body += list(parts.zero_if)
    if parts.zero_cond:
        body += [Compute("%o_div", "divide", ("%o_all", "%l_all")),
                 Compute(parts.acc, "where", (parts.zero_cond, 0.0, "%o_div"), "the source zeroes a masked row")]
    else:
        body.append(Compute(parts.acc, "divide", ("%o_all", "%l_all")))
    body += list(parts.epilogue) + [parts.store]
    nest = (Loop(col, parts.columns, "free", tuple(body)),)
    for lp in reversed(rows):
        nest = (Loop(lp.var, lp.extent, "free", nest),)
    return Kernel(name, outputs, renumber(nest))


def bounded(kernel: Kernel, scalars: frozenset[str]) -> Kernel:
    """The split kernel with its key loop stopped at run time where the score proves it: the
    score is `where(less_equal(key index, pos[0] + c), x, -inf)` with pos a runtime scalar
    (key_mask's decomposition), so every key past pos + c scores -inf and changes nothing in
    the online softmax (its exp is 0, the max and rescale stay): the loop runs while
    key <= pos + c. Otherwise the kernel as it is (the mask alone does the work)."""
    rows, keys, *_ = flash_parts(kernel)
    stop = key_bound(keys, scalars, {s.dst: s for s, _ in walk(kernel.body) if isinstance(s, (Load, Compute))})
    if stop is None:
        return kernel
    new_keys = dataclasses.replace(keys, stop=stop)
    body = _replaced(kernel.body, keys, new_keys)
    return dataclasses.replace(kernel, body=body)


def key_bound(keys: Loop, scalars: frozenset[str], defs: dict) -> Affine | None:
    """stop with keys.var < stop exactly where the score is not forced to -inf; None unless
    the mask says so (see bounded). defs: the kernel's values by name."""
    score = next((s.args[1] for s in keys.body if isinstance(s, Compute) and s.op == "maximum"), None)
    where = defs.get(score)
    if not (isinstance(where, Compute) and where.op == "where" and where.args[2] == float("-inf")):
        return None
    test = defs.get(where.args[0])
    if not (isinstance(test, Compute) and test.op == "less_equal" and isinstance(test.args[0], Affine)):
        return None
    at = test.args[0]
    coef = dict(at.terms).get(Var(keys.var))
    if coef != 1 or any(isinstance(a, Gather) for a, _ in at.terms):
        return None
    bound = _position(test.args[1], defs, scalars)
    if bound is None:
        return None
    # key index = keys.var + rest <= bound  <=>  keys.var < bound + 1 - rest
    rest = at - var(keys.var)
    return bound + 1 - rest


def _position(name, defs, scalars) -> Affine | None:
    """The value `name` as pos[0] + c (a runtime scalar's load plus integer constants), else None."""
    s = defs.get(name)
    if isinstance(s, Load) and s.tensor in scalars and len(s.index) == 1 and s.index[0].is_const \
            and s.index[0].const == 0:
        return as_affine(Gather(s.tensor, (const(0),)))
    if isinstance(s, Compute) and s.op in ("add", "subtract") and len(s.args) == 2 and isinstance(s.args[0], str) \
            and isinstance(s.args[1], (int, float)) and not isinstance(s.args[1], bool) \
            and float(s.args[1]).is_integer():
        inner = _position(s.args[0], defs, scalars)
        c = int(s.args[1])
        if inner is not None:
            return inner + (c if s.op == "add" else -c)
    return None


def _replaced(body, old: Loop, new: Loop) -> tuple:
    out = []
    for s in body:
        if s is old:
            s = new
        elif isinstance(s, Loop):
            s = dataclasses.replace(s, body=_replaced(s.body, old, new))
        out.append(s)
    return tuple(out)
