"""What a Loop-IR kernel computes, in a model's words: "self_attn.q_proj: matmul",
"input_layernorm: rmsnorm", "rope", "mlp: silu(gate) * up", "o_proj: matmul + residual".

Kernel names stay the fused root's (`merged_layer0_mul_4`: deterministic, valid C, what the
config keys and golden tests use); this is the label the inventory and the timeline print
beside them. The module path comes from the weights the kernel reads (a captured parameter is
named after it: p_model_layers_0_self_attn_q_proj_weight), the op from the arithmetic: a
contraction is a matmul, rsqrt over a row's mean square an RMSNorm, exp against a row max a
softmax, a tensor read at +/- half its last dimension (rotate_half) and mixed with cos/sin a
rotary embedding, sigmoid times its input times another tensor a SwiGLU."""
from __future__ import annotations

import re

from ..ir.loop_ir import Accumulate, Compute, Kernel, Load, Loop, walk

_CONTAINERS = re.compile(r"^(model_)?(layers_\d+_)?")


def module_of(param: str) -> str:
    """p_model_layers_0_self_attn_q_proj_weight -> self_attn.q_proj (best effort: the last two
    parts of the module path, `.`-joined where a known container starts it)."""
    path = _CONTAINERS.sub("", re.sub(r"_(weight|bias)$", "", param[2:]))
    for container in ("self_attn_", "mlp_"):
        if path.startswith(container):
            return container[:-1] + "." + path[len(container):]
    return path


def computes(kernel: Kernel, types: dict | None = None) -> str:
    """A short description of what `kernel` computes (module: op), '' when nothing is recognised."""
    stmts = [s for s, _ in walk(kernel.body)]
    ops = {s.op for s in stmts if isinstance(s, Compute)}
    loads = [s for s in stmts if isinstance(s, Load)]
    params = list(dict.fromkeys(s.tensor for s in loads if s.tensor.startswith("p_")))
    modules = list(dict.fromkeys(m for m in (module_of(p) for p in params) if m and m != "weight"))
    contraction = any(isinstance(s, Loop) and s.role == "K" for s in stmts)
    if kernel.flash is not None:
        what = "attention (flash)"
    elif contraction:
        what = "matmul"
        others = {s.tensor for s in loads if s.tensor not in params}     # activations, a residual
        if len(others) > 1 and "add" in ops and not any(isinstance(s, Accumulate) and s.reduction == "max"
                                                        for s in stmts):
            what += " + residual"
    elif "rsqrt" in ops:
        what = "rmsnorm"
        if len({s.tensor for s in loads if not s.tensor.startswith("p_")}) > 1 and "add" in ops:
            what = "residual + rmsnorm"
    elif "exp" in ops and any(isinstance(s, Accumulate) and s.reduction == "max" for s in stmts):
        what = "softmax"
    elif _rotates_half(loads):
        what = "rope"
    elif "sigmoid" in ops and "multiply" in ops:
        what = "silu(gate) * up"
    elif any(s.op == "gather" for s in stmts if isinstance(s, Compute)) or kernel.name.startswith("embedding"):
        what = "embedding"
    else:
        what = ""
    where = ", ".join(modules)
    return f"{where}: {what}" if where and what else where or what


def _rotates_half(loads) -> bool:
    """The same tensor read at two shifted windows, padded (rotate_half's two halves)."""
    padded = [s for s in loads if s.pad is not None]
    return len({s.tensor for s in padded}) >= 1 and len(padded) >= 2


def merged_labels(labels) -> str:
    """One label for a unique kernel that several launches run: their modules joined where
    the op is the same ("self_attn.k_proj / self_attn.v_proj: matmul"), else the distinct
    labels, in launch order."""
    distinct = list(dict.fromkeys(label for label in labels if label))
    ops = {label.split(": ")[-1] for label in distinct}
    if len(distinct) > 1 and len(ops) == 1 and all(": " in label for label in distinct):
        return " / ".join(label.split(": ")[0] for label in distinct) + ": " + ops.pop()
    return "; ".join(distinct)
