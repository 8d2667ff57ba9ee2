"""The one definition of a byte and of a FLOP that every analysis counts with.

A byte: an element of a buffer takes DTYPE_BYTES[dtype] bytes on the device (a bool is one
byte, as in torch); a Kernel-IR parameter's C type maps to its dtype first. The table itself
sits in ir/types.py beside the dtypes (TensorType.itemsize); this module is where analyses
take it from. A FLOP: one
arithmetic Compute or one Accumulate of the Loop/Tile IR, per element it runs for (a
multiply-add is 2); selections and comparisons move values without arithmetic and are not
FLOPs (they still cost instructions, which work.py counts separately).
"""
from __future__ import annotations

from ..ir.loop_ir import Accumulate, Compute
from ..ir.types import CTYPE_DTYPE, DTYPE_BYTES, ctype_bytes

__all__ = ["DTYPE_BYTES", "CTYPE_DTYPE", "NON_FLOP_OPS", "ctype_bytes", "dtype_bytes", "is_flop"]

# Compute ops that are selections, comparisons or storage conversions, not floating-point arithmetic.
NON_FLOP_OPS = frozenset({"convert", "round_tf32", "where", "greater", "less", "greater_equal", "less_equal", "equal",
                          "not_equal", "logical_and", "logical_or", "logical_not"})


def dtype_bytes(dtype: str) -> int:
    """Bytes of one element of `dtype` (an IR dtype name; TensorType.itemsize reads the same table)."""
    return DTYPE_BYTES[dtype]


def is_flop(stmt) -> bool:
    """Whether one execution of `stmt` (a Loop- or Tile-IR statement) is one FLOP."""
    return isinstance(stmt, Accumulate) or (isinstance(stmt, Compute) and stmt.op not in NON_FLOP_OPS)
