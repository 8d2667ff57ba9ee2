"""The decompose pass, Torch IR → Tensor IR: every op through its own rule (see registry.RULES;
importing this module imports every rule).

Half precision (docs/precision.md): a bfloat16 or float16 buffer is read once through an
explicit `x_f32 = convert(x) -> float32` node and every rule computes in float32; a half
output is rounded by a last `convert(...) -> bfloat16`. The rules never see a half type, except
`to`, whose explicit cast to half rounds (as eager does at a cast the user wrote)."""
from __future__ import annotations

from dataclasses import replace

from ...errors import UnsupportedDtypeError, UnsupportedOpError
from ...ir.tensor_ir import CONVERT_OP, TensorProgram
from ...ir.torch_ir import TorchProgram
from ...ir.types import HALF_DTYPES
from ..record import Pass
from . import (  # noqa: F401
    addcmul,
    addmm,
    all_any,
    argmax,
    binary,
    bitwise,
    cat,
    channel_norms,
    clamp,
    conv1d,
    copies,
    cosine_similarity,
    cumsum,
    diag,
    einsum,
    elu,
    embedding,
    expand,
    flip,
    gelu,
    glu,
    grouped_mm,
    hardswish,
    hardtanh,
    histc,
    index_copy,
    index_put,
    index_select,
    key_mask,
    layer_norm,
    leaky_relu,
    lerp,
    linear,
    log_softmax,
    logaddexp,
    logsumexp,
    matmul,
    mish,
    nonfinite,
    one_hot,
    outer,
    pad,
    permute,
    pool,
    pow,
    reductions,
    repeat,
    repeat_interleave,
    reshape,
    rms_norm,
    rounding,
    sdpa,
    shrink,
    sign,
    silu,
    slice,
    softmax,
    softplus,
    special,
    square,
    squeeze,
    stack,
    topk,
    transpose,
    tril,
    unary,
    unfold,
    unsqueeze,
    variance,
    vector_norm,
    where,
)
from .builder import Builder
from .registry import RULES

# Torch-IR ops whose result dtype the rule must see as written: a cast to half rounds;
# nan_to_num's default for an infinity is the largest finite value of the half format.
_CASTS = ("to", "nan_to_num")
# Torch-IR ops that contract their operands (a sum of products), and which arguments those are.
# (einsum: every argument)
CONTRACTION_OPERANDS = {"matmul": (0, 1), "mm": (0, 1), "bmm": (0, 1), "linear": (0, 1), "addmm": (1, 2),
                        "baddbmm": (1, 2), "grouped_mm": (0, 1), "scaled_dot_product_attention": (0, 1, 2)}
# Ops whose result jumps where an operand crosses a point (a comparison, a rounding, an index
# of the largest): fed a half op's unrounded value they may decide otherwise than eager, which
# rounded it (x_bf16 * 3 > 1 at x * 3 = 1.0009: eager's product is 1.0, not > 1).
DECISIONS = frozenset(("gt", "lt", "ge", "le", "eq", "ne", "floor_divide", "remainder", "floor", "ceil",
                       "round", "trunc", "frac", "sign", "all", "any", "atan2", "argmax", "argmin", "topk",
                       "histc"))
# Ops that move or copy their first argument's elements without computing on them.
_VIEWS = frozenset(("view", "reshape", "flatten", "unflatten", "permute", "transpose", "t", "expand", "expand_as",
                    "squeeze", "unsqueeze", "slice", "select", "contiguous", "clone", "alias", "detach", "dropout",
                    "to", "flip", "roll"))
# The suffix of a half tensor's float32 copy and of a half output's rounded value.
_SHORT = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}


def decompose(program: TorchProgram, ctx=None) -> TensorProgram:
    if ctx is not None:
        require_half_support(program, ctx.target)
    b = Builder({bf.name: bf.type for bf in program.buffers}, {op.name for op in program.ops},
                precision=ctx.precision if ctx is not None else "float32")
    names = {bf.name: bf.name for bf in program.buffers}
    dtypes = {bf.name: bf.type.dtype for bf in program.buffers}
    # A half state written in place (a KV cache in bf16) keeps its storage: the write rounds
    # its value to half, as eager's index_copy does, and the readers convert the written cache
    in_place = {op.name for op in program.ops if op.op == "index_copy" and dtypes.get(op.args[0]) in HALF_DTYPES}
    read = {a for op in program.ops for a in (op.args[1:] if op.name in in_place else op.args) if isinstance(a, str)}
    operands = half_contraction_operands(program)
    decided = half_decision_operands(program)
    stored: dict[str, str] = {}       # op -> the half node its rounded value is stored in
    for bf in program.buffers:      # a half buffer is read as float32, converted once
        if bf.type.dtype in HALF_DTYPES and bf.name in read:
            names[bf.name] = b.elementwise(CONVERT_OP, bf.name, hint=f"{bf.name}_f32", dtype="float32")
    for op in program.ops:
        rule = RULES.get(op.op)
        if rule is None:
            raise UnsupportedOpError(f"no Tensor-IR rule for Torch-IR op {op.op} (node {op.name}); "
                                     f"rules exist for: {', '.join(sorted(RULES))}")
        ttype = op.type if op.op in _CASTS or op.type.dtype not in HALF_DTYPES else replace(op.type, dtype="float32")
        args = tuple(names.get(a, a) if isinstance(a, str) else a for a in op.args)
        if op.name in in_place:
            cache, pos, src = op.args
            want = dtypes[cache]
            args = (cache, names.get(pos, pos), b.elementwise(CONVERT_OP, names[src], hint=f"{src}_{_SHORT[want]}",
                                                              dtype=want))
            ttype = op.type
        mapped = op.__class__(op.name, op.op, args, op.attrs, ttype)
        first_new = len(b.nodes)
        result = rule(mapped, b)
        # The op's last node carries the Torch-IR name, so the two IRs read side by side.
        if result != op.name and b.rename_last(result, op.name, first_new):
            result = op.name
        if b.shape(result) != op.type.shape:
            raise UnsupportedOpError(f"rule for {op.op} (node {op.name}) produced shape {b.shape(result)}, "
                                     f"torch says {op.type.shape}")
        names[op.name] = result
        if op.name in in_place:       # read on in float32, like any half buffer
            names[op.name] = b.elementwise(CONVERT_OP, result, hint=f"{op.name}_f32", dtype="float32")
        elif op.name in operands:
            names[op.name] = _rounded_half(b, names[op.name], op, stored)
        elif op.name in decided:
            names[op.name] = _rounded_half(b, names[op.name], op)
        grouped_mm.note_counts(op, mapped.args, result, b)
    types = {bf.name: bf.type for bf in program.buffers} | {op.name: op.type for op in program.ops}
    outputs = []
    for o in program.outputs:    # a half output: its float32 value rounded once, where it is stored
        want = types[o].dtype
        if o in stored and b.type(stored[o]).dtype == want:
            names[o] = stored[o]
        elif want in HALF_DTYPES and b.type(names[o]).dtype != want:
            names[o] = b.elementwise(CONVERT_OP, names[o], hint=f"{o}_{_SHORT[want]}", dtype=want)
        outputs.append(names[o])
    outputs = tuple(outputs)
    created = {n.name for n in b.nodes}
    results = frozenset(r for r in names.values() if r in created)
    return TensorProgram(program.buffers, tuple(b.nodes), outputs, results, frozenset(stored.values()))


def half_contraction_operands(program: TorchProgram) -> set[str]:
    """The half ops whose values a contraction (a matmul, attention) reads as an operand, through
    views: eager stores each in half before the contraction reads it, and so does deplokit."""
    def operands(op):
        positions = range(len(op.args)) if op.op == "einsum" else CONTRACTION_OPERANDS.get(op.op, ())
        return [op.args[i] for i in positions if i < len(op.args)]
    ops = {op.name: op for op in program.ops}
    return {a for a in _half_sources(program, operands) if a in ops and not _probabilities(ops, a)}


def half_decision_operands(program: TorchProgram) -> set[str]:
    """The half ops and inputs whose values a comparison, a rounding, an arg-max or a cast to an
    integer reads (DECISIONS), through views. Decompose rounds each op's value as eager rounds it
    (in registers: nothing is stored), so that the decision is eager's; a float32 run of the
    program decides on unrounded values (and scalars), so check() compares with eager alone."""
    def decides(op):
        return op.op in DECISIONS or (op.op == "to" and op.type.dtype in ("bool", "int64", "int32"))
    # every half value behind a decision, through float32 ops too: eager rounded each one on the
    # way (v = x * 3 + 1 - 0.5 rounds three times in bf16; one rounding at the end can put v on
    # the other side of 0; remainder(mm(a, b).float() * 4, 2.5) reads the fp16 product rounded)
    ops = {op.name: op for op in program.ops}
    todo = [a for op in program.ops if decides(op) for a in op.args if isinstance(a, str)]
    seen, found = set(todo), set()
    while todo:
        name = todo.pop()
        if _dtype(program, ops, name) in HALF_DTYPES:
            found.add(name)
        for a in (ops[name].args if name in ops else ()):
            if isinstance(a, str) and a not in seen:
                seen.add(a)
                todo.append(a)
    return found


def _half_sources(program: TorchProgram, reads) -> set[str]:
    """The half ops and buffers (through same-dtype views) whose values `reads(op)` lists."""
    ops = {op.name: op for op in program.ops}
    found = set()
    for op in program.ops:
        for arg in reads(op):
            while arg in ops and ops[arg].op in _VIEWS and isinstance(ops[arg].args[0], str) \
                    and ops[arg].type.dtype == _dtype(program, ops, ops[arg].args[0]):
                arg = ops[arg].args[0]
            if isinstance(arg, str) and _dtype(program, ops, arg) in HALF_DTYPES:
                found.add(arg)
    return found


def _probabilities(ops: dict, name: str) -> bool:
    """A softmax's result (or its cast, as transformers' eager attention writes it): attention's
    P, which the flash kernel rounds to half before P @ V itself (fuse_attention); a store
    would split the attention."""
    while name in ops and ops[name].op in _VIEWS and isinstance(ops[name].args[0], str):
        name = ops[name].args[0]
    return name in ops and ops[name].op == "softmax"


def _dtype(program: TorchProgram, ops: dict, name: str) -> str | None:
    if name in ops:
        return ops[name].type.dtype
    return next((bf.type.dtype for bf in program.buffers if bf.name == name), None)


def _rounded_half(b: Builder, value: str, op, stored: dict[str, str] | None = None) -> str:
    """`value` (op's result in float32) rounded to op's half dtype, as eager rounds it: the
    float32 value read back from the half node is returned, and the half node is recorded in
    `stored` when given (fusion stores it, a tensor core reads it raw). A value already read
    from half storage (a cast the user wrote) is not rounded again."""
    stored = {} if stored is None else stored
    want = op.type.dtype
    node = next((n for n in reversed(b.nodes) if n.name == value), None)
    if getattr(node, "op", None) == CONVERT_OP and len(node.args) == 1 and b.type(node.args[0]).dtype == want:
        if any(n.name == node.args[0] for n in b.nodes):
            stored[op.name] = node.args[0]
        return value
    rounded = b.elementwise(CONVERT_OP, value, hint=f"{op.name}_{_SHORT[want]}", dtype=want)
    stored[op.name] = rounded
    return b.elementwise(CONVERT_OP, rounded, hint=f"{op.name}_r", dtype="float32")


def require_half_support(program: TorchProgram, target) -> None:
    """Refuse a bfloat16 program for a target without bf16 conversions (before sm_80)."""
    if not target.bf16 and any(bf.type.dtype == "bfloat16" for bf in program.buffers):
        raise UnsupportedDtypeError(
            f"bfloat16 tensors need sm_80 or newer (__nv_bfloat16 conversions); target {target.name} "
            f"has none: compile for sm_80, sm_90 or sm_120, or use float16 or float32")


PASS = Pass("decompose", "tensor", "rewrite each Torch op into Tensor-IR nodes",
            lambda program, pctx: decompose(program, pctx.compile))
