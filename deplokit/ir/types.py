"""Types shared by every IR: a tensor's static type and the buffers a program reads."""
from __future__ import annotations

from dataclasses import dataclass

# Element types deplokit computes with: float32 for arithmetic, int64/int32 computed exactly at
# their width (ids, positions, counts), bool for masks. bfloat16 and float16 are storage types
# only (docs/precision.md): a half tensor is converted to float32 where it is read (an explicit
# `convert` node), computed on in float32, and rounded to nearest even where it is stored.
DTYPES = ("float32", "int64", "int32", "bool", "bfloat16", "float16")
HALF_DTYPES = ("bfloat16", "float16")
FLOAT_DTYPES = ("float32",) + HALF_DTYPES


def holds_int64(value: float) -> bool:
    """Whether the float is a whole number int64 holds (1e19 is whole, and past it): the
    integral float constants the IRs may read as integers."""
    return float(value).is_integer() and abs(value) < 2 ** 63
# Bytes one element of each dtype takes in memory: the one table every byte count reads.
DTYPE_BYTES = {"float32": 4, "int64": 8, "int32": 4, "bool": 1, "bfloat16": 2, "float16": 2}
# Kernel IR's element types (Param.ctype, loads' ctype) as dtypes.
CTYPE_DTYPE = {"float": "float32", "float32": "float32", "int64": "int64", "int32": "int32", "int": "int32",
               "bool": "bool", "bf16": "bfloat16", "f16": "float16"}
# The Kernel-IR scalar type a value of each dtype is held in (a local's Declare, a load's ctype):
# the one table the lowering reads. "int" stays the type of index arithmetic (32-bit, or 64-bit
# in a kernel stamped wide); int32 values are "int32" so that the two are never confused.
DTYPE_CTYPE = {"float32": "float", "int64": "int64", "int32": "int32", "bool": "bool", "bfloat16": "bf16",
               "float16": "f16"}
INTEGER_DTYPES = ("int64", "int32")


def value_dtype(dtype: str) -> str:
    """The dtype a value read from a tensor of `dtype` is computed in: a half element is
    converted to float32 as it is loaded (float32 holds every half value exactly)."""
    return "float32" if dtype in HALF_DTYPES else dtype


def shared_ctype(dtype: str) -> str:
    """The element type of a shared array holding a tensor of `dtype`: integers their own
    (exact), bool and float32 as float (0.0/1.0 are exact, 4-byte words as the bank model counts);
    a half tensor is staged converted to float (its copies are sync: a bf16 value is exact in float)."""
    return DTYPE_CTYPE[dtype] if dtype in INTEGER_DTYPES else "float"


def ctype_bytes(ctype: str) -> int:
    """Bytes of one element of a Kernel-IR element type (4 for an unknown one)."""
    return DTYPE_BYTES.get(CTYPE_DTYPE.get(ctype, "float32"), 4)


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str = "float32"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 4)

    def __str__(self) -> str:
        return f"{format_shape(self.shape)} {self.dtype}"


def format_shape(shape: tuple[int, ...]) -> str:
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ", ".join(str(s) for s in shape) + ")"


# Where a program's buffer comes from: a user input (passed to run), a parameter or
# buffer of the module (held by the Compilation), a constant folded at compile time, or a
# temporary that one kernel writes and a later one reads, or a program output.
# Two more for generation (docs/generation.md): a runtime `scalar` (one int64 passed at each
# call, e.g. the decode position: index expressions read it as `pos[0]` and it reaches the
# CUDA as a kernel argument, its value in device memory) and `state` (a tensor the program
# holds between calls and updates in place, e.g. a static KV cache).
# counter: integers zero before the first launch that the kernels return to zero (split-K's
# arrival counters): allocated zeroed, never in the scratch arena
BUFFER_KINDS = ("input", "param", "const", "temp", "output", "scalar", "state", "counter")


@dataclass(frozen=True)
class Buffer:
    name: str
    type: TensorType
    kind: str = "input"
    # A written buffer that lives in the storage of state buffer `alias` (an in-place update:
    # its kernel writes only the elements that change, the rest are the state's own).
    alias: str = ""

    def __str__(self) -> str:
        into = f" (in place in {self.alias})" if self.alias else ""
        kind = "runtime scalar" if self.kind == "scalar" else self.kind
        return f"{self.name}: {self.type} {kind}{into}"


def format_scalar(value: float | int | bool) -> str:
    """Deterministic text for a scalar constant: integers without a dot, floats by repr."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if value != value:
        return "nan"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if float(value).is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(float(value))


def format_header(buffers, outputs) -> str:
    """The `-v` header every program prints: one `# name: shape dtype kind` line a buffer."""
    lines = [f"# {b}" for b in buffers]
    lines.append(f"# outputs: {', '.join(outputs)}")
    return "\n".join(lines)
