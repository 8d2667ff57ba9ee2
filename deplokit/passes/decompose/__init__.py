"""Torch IR → Tensor IR: every op through its own rule (see registry.RULES)."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.tensor_ir import TensorProgram
from ...ir.torch_ir import TorchProgram
from . import (  # noqa: F401
    addmm,
    argmax,
    binary,
    bitwise,
    cat,
    clamp,
    copies,
    cumsum,
    einsum,
    embedding,
    expand,
    gelu,
    hardswish,
    hardtanh,
    index_copy,
    index_select,
    layer_norm,
    leaky_relu,
    linear,
    log_softmax,
    logsumexp,
    matmul,
    mish,
    permute,
    pow,
    reductions,
    repeat,
    repeat_interleave,
    reshape,
    rms_norm,
    sdpa,
    silu,
    slice,
    softmax,
    softplus,
    square,
    squeeze,
    stack,
    transpose,
    tril,
    unary,
    unsqueeze,
    variance,
    vector_norm,
    where,
)
from .builder import Builder
from .registry import RULES


def decompose(program: TorchProgram, ctx=None) -> TensorProgram:
    b = Builder({bf.name: bf.type for bf in program.buffers}, {op.name for op in program.ops})
    names = {bf.name: bf.name for bf in program.buffers}
    for op in program.ops:
        rule = RULES.get(op.op)
        if rule is None:
            raise UnsupportedOpError(f"no Tensor-IR rule for Torch-IR op {op.op} (node {op.name}); "
                                     f"rules exist for: {', '.join(sorted(RULES))}")
        mapped = op.__class__(op.name, op.op, tuple(names.get(a, a) if isinstance(a, str) else a for a in op.args),
                              op.attrs, op.type)
        first_new = len(b.nodes)
        result = rule(mapped, b)
        # The op's last node carries the Torch-IR name, so the two IRs read side by side.
        if result != op.name and b.rename_last(result, op.name, first_new):
            result = op.name
        if b.shape(result) != op.type.shape:
            raise UnsupportedOpError(f"rule for {op.op} (node {op.name}) produced shape {b.shape(result)}, "
                                     f"torch says {op.type.shape}")
        names[op.name] = result
    outputs = tuple(names[o] for o in program.outputs)
    created = {n.name for n in b.nodes}
    results = frozenset(r for r in names.values() if r in created)
    return TensorProgram(program.buffers, tuple(b.nodes), outputs, results)
