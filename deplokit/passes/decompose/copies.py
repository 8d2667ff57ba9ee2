"""to / contiguous / clone / alias / detach / dropout (eval): the tensor itself; copy (a
functional copy_): the source broadcast to the destination's shape and cast to its dtype.

A cast between the dtypes deplokit holds is not a no-op: mask.float() must turn True into
1.0 (a sum of it counts), x.bool() must test against zero. Casts that round (float to
integer) truncate toward zero, as in torch; integer to integer keeps the values."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.tensor_ir import CONVERT_OP
from ...ir.types import HALF_DTYPES
from .builder import Builder
from .registry import rule


@rule("to", "contiguous", "clone", "alias", "detach", "dropout")
def decompose_copy(op, b: Builder) -> str:
    return cast(b, op.args[0], op.type.dtype, f"{op.op} (node {op.name})")


@rule("copy")
def decompose_copy_into(op, b: Builder) -> str:
    """dest.copy_(src) made functional (capture): src broadcast to dest's shape, in dest's dtype."""
    return cast(b, b.broadcast_to(op.args[0], op.type.shape), op.type.dtype, f"copy_ (node {op.name})")


def cast(b: Builder, x: str, want: str, where: str) -> str:
    """x as dtype `want`, in the Tensor-IR primitives (there is no cast node)."""
    have = b.type(x).dtype
    if have == want:
        return x
    if want in HALF_DTYPES:   # a cast the user wrote rounds, as in eager; the value goes on in float32
        x = cast(b, x, "float32", where)
        rounded = b.elementwise(CONVERT_OP, x, hint=f"{x}_{'bf16' if want == 'bfloat16' else 'f16'}", dtype=want)
        return b.elementwise(CONVERT_OP, rounded, hint=f"{x}_r", dtype="float32")
    if want == "bool":
        return b.elementwise("not_equal", x, 0, hint="cast")
    if want == "float32":
        if have == "bool":
            return b.elementwise("where", x, 1.0, 0.0, hint="cast")
        return b.elementwise("multiply", x, 1.0, hint="cast")
    if have == "bool":   # bool -> int64 (int32 too, held as int64: the same values)
        return b.elementwise("where", x, 1, 0, hint="cast")
    if have in ("int64", "int32"):   # int -> int: a node of the new width (int64 -> int32 wraps, as in torch)
        return b.elementwise("add", x, 0, hint="cast", dtype=want)
    if have == "float32" and want in ("int64", "int32"):   # 2.7 -> 2, -2.7 -> -2
        return b.elementwise("trunc", x, hint="cast", dtype=want)
    raise UnsupportedOpError(f"{where} casts {have} to {want}; deplokit supports casts to "
                             f"float32, bool, int64 and int32")
