"""&, |, ^, ~ (bitwise_and/or/xor/not): on bools, the logical ops masks are combined with.
On integers deplokit has no bitwise arithmetic and says so."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from .builder import Builder
from .registry import rule

_LOGICAL = {"bitwise_and": "logical_and", "bitwise_or": "logical_or", "bitwise_not": "logical_not"}


@rule("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not")
def decompose_bitwise(op, b: Builder) -> str:
    dtypes = {b.type(a).dtype if isinstance(a, str) else type(a).__name__ for a in op.args}
    if not dtypes <= {"bool"}:
        raise UnsupportedOpError(f"{op.op} (node {op.name}) on {', '.join(sorted(dtypes))}; deplokit supports "
                                 "&, |, ^ and ~ on bool tensors (masks) only")
    if op.op == "bitwise_xor":
        return b.elementwise("not_equal", *op.args)
    return b.elementwise(_LOGICAL[op.op], *op.args)
