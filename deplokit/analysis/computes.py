"""What a Loop-IR kernel computes, in a model's words: "self_attn.q_proj: matmul",
"input_layernorm: rmsnorm", "rope", "mlp: silu(gate) * up", "o_proj: matmul + residual";
and a model's kernel names, made of the same words (`kernel_names`).

The module path comes from the weights the kernel reads (a captured parameter is named after
it: p_model_layers_0_self_attn_q_proj_weight), the op from the arithmetic: a contraction is a
matmul, rsqrt over a row's mean square an RMSNorm, exp against a row max a softmax, a tensor
read at +/- half its last dimension (rotate_half) and mixed with cos/sin a rotary embedding,
sigmoid times its input times another tensor a SwiGLU.

Names: a kernel of a model (one that reads a module's weights, or whose inputs another such
kernel wrote) is named `<layer>_<module>_<op>` (layer0_input_layernorm_rms_norm,
layer0_self_attn_q_proj, layer0_self_attn_q_proj_rope, layer0_self_attn_flash_attention,
layer0_self_attn_o_proj_add, layer0_mlp_gate_up_silu_mul, layer0_mlp_down_proj_add,
lm_head): the layer from its weights' path (or its producers'), the module from its weights
(or the modules its inputs came from: rope reads q_proj's output), the op from the
arithmetic (nothing for a module's own matmul, `add` where a residual is added). A second
kernel of the same name gets `_1`, `_2`, ... in program order. Any other kernel keeps the
fused root's name (`merged_rms_norm`): an expression has no module path to say more."""
from __future__ import annotations

import re

from ..ir.index import gathers
from ..ir.loop_ir import Accumulate, Compute, Kernel, Load, Loop, walk

# the containers before a layer's module path: model_, a wrapper's inner_model_model_ (the decode
# program's static-cache exporter), layers_N_
_CONTAINERS = re.compile(r"^(?:\w*?model_)*(?:layers_\d+_)?")


def module_of(param: str) -> str:
    """p_model_layers_0_self_attn_q_proj_weight (or p_inner_model_model_layers_0_...) ->
    self_attn.q_proj (best effort: the last two
    parts of the module path, `.`-joined where a known container starts it)."""
    path = _CONTAINERS.sub("", re.sub(r"_(weight|bias)$", "", param[2:]))
    for container in ("self_attn_", "mlp_"):
        if path.startswith(container):
            return container[:-1] + "." + path[len(container):]
    return path


def computes(kernel: Kernel, types: dict | None = None) -> str:
    """A short description of what `kernel` computes (module: op), '' when nothing is recognised."""
    modules, what = _module_and_op(kernel)
    where = ", ".join(modules)
    return f"{where}: {what}" if where and what else where or what


def _module_and_op(kernel: Kernel) -> tuple[list[str], str]:
    """(the modules whose weights `kernel` reads, `self_attn.q_proj` form; the op it computes, '' if unknown)."""
    stmts = [s for s, _ in walk(kernel.body)]
    ops = {s.op for s in stmts if isinstance(s, Compute)}
    loads = [s for s in stmts if isinstance(s, Load)]
    params = list(dict.fromkeys(s.tensor for s in loads if s.tensor.startswith("p_")))
    modules = list(dict.fromkeys(m for m in (module_of(p) for p in params) if m and m not in ("weight", "bias")))
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
    elif any(s.op == "gather" for s in stmts if isinstance(s, Compute)) or kernel.name.startswith("embedding") \
            or any(gathers(e) for s in loads if s.tensor in params for e in s.index):   # a table row per index
        what = "embedding"
    else:
        what = ""
    return modules, what


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


# the op, as a name part; a module's own matmul (or lookup) is named by the module alone
_OP_PART = {"matmul": "matmul", "matmul + residual": "add", "rmsnorm": "rms_norm", "residual + rmsnorm": "add_rms_norm",
            "softmax": "softmax", "rope": "rope", "silu(gate) * up": "silu_mul", "embedding": "embedding",
            "attention (flash)": "flash_attention", "attention": "attention"}
_LAYER = re.compile(r"(?:^|_)layers_(\d+)_")
_STITCHED_LAYER = re.compile(r"^layer(\d+)_")      # a stitched model's tensors (frontend/stitch.py)


class KernelNamer:
    """Names of a model's kernels from what they compute, in program order: `name(kernel)`
    for each kernel as it comes (its producers named before it), `unique(base)` to keep
    them apart. A kernel that is not a model's gets ''."""

    def __init__(self, taken=()):
        self.written: dict[str, tuple[str, tuple[str, ...]]] = {}   # tensor -> (layer, modules) of its writer
        self.taken = set(taken)
        self.fed = 0

    def name_at(self, kernels, i: int, kernel: Kernel, op: str | None = None) -> str:
        """The name of `kernel`, about to replace kernels[i:...] (a fusion of them): the
        kernels before it are read in order, once over the namer's life, so call it for
        increasing i with kernels[:i] unchanged between calls."""
        while self.fed < i:
            self.base(kernels[self.fed])
            self.fed += 1
        base = self.base(kernel, op)
        self.fed = i + 1
        if not base:
            return kernel.name
        self.taken = {k.name for k in kernels}
        return self.unique(base)

    def base(self, kernel: Kernel, op: str | None = None) -> str:
        """`<layer>_<module>_<op>`, '' for a kernel outside a model's modules; records what
        `kernel` writes for the kernels after it."""
        loads = [s.tensor for s, _ in walk(kernel.body) if isinstance(s, Load)]
        params = list(dict.fromkeys(t for t in loads if t.startswith("p_")))
        # a numeric path part (nn.Sequential's children: 0.linear) says nothing and would open
        # a name with a digit: it is skipped (0.linear -> linear; a bare 0 leaves no module)
        own = [m for m in ("_".join(p for p in re.split(r"[._]", m) if not p.isdigit())
                           for m in _module_and_op(kernel)[0]) if m]
        layers = [m[1] for m in map(_LAYER.search, params) if m]
        inherited = [self.written[t] for t in dict.fromkeys(loads) if t in self.written]
        modules = own or list(dict.fromkeys(m for _, ms in inherited for m in ms))
        stitched = _STITCHED_LAYER.match(kernel.outputs[0]) if kernel.outputs else None
        # a module's own weights say its layer (none: the final norm, lm_head); else its inputs'
        layer = layers[0] if layers else stitched[1] if stitched else "" if own else \
            next((lay for lay, _ in inherited if lay), "")
        for t in kernel.outputs:
            self.written[t] = (layer, tuple(modules))
        if not modules:
            return ""
        what = op if op is not None else _module_and_op(kernel)[1]
        part = _OP_PART.get(what, "")
        if own and what in ("matmul", "embedding"):
            part = ""
        written = [t for t in kernel.outputs if t.endswith("_written")]
        if not what and not written:    # an op with no word for it: the root's, without a stitched layer's prefix
            part = re.sub(r"_\d+$", "", _STITCHED_LAYER.sub("", kernel.outputs[0] if kernel.outputs else kernel.name))
        # an in-place write into state (a KV cache: kv_cache0_written) says so: _write_kv_cache
        states = [re.sub(r"\d*_written$", "", t) for t in written]
        write = f"write_{states[0]}" if states else ""
        return "_".join(p for p in (f"layer{layer}" if layer else "", module_part(modules), part, write) if p)

    def unique(self, base: str) -> str:
        name, n = base, 0
        while name in self.taken:
            n += 1
            name = f"{base}_{n}"
        self.taken.add(name)
        return name

    def name(self, kernel: Kernel, op: str | None = None) -> str:
        """The kernel's name by what it computes (unique among those named so far), or its
        own name where it is no model's."""
        base = self.base(kernel, op)
        return self.unique(base) if base else kernel.name


def module_part(modules) -> str:
    """self_attn_q_proj; mlp_gate_proj + mlp_up_proj -> mlp_gate_up (their common path and
    what follows it, `_proj` dropped); more than two under a common path -> that path alone
    (self_attn); none: what is left of each (q_proj, k_proj, v_proj -> q_k_v)."""
    if len(modules) == 1:
        return modules[0]
    parts = [m.split("_") for m in modules]
    common = []
    for column in zip(*parts):
        if len(set(column)) > 1:
            break
        common.append(column[0])
    tails = [re.sub(r"_proj$", "", "_".join(p[len(common):])) for p in parts]
    if len(tails) > 2 and common:
        return "_".join(common)
    return "_".join(common + [t for t in tails if t])


def kernel_names(kernels) -> list[str]:
    """Every kernel's name by what it computes, in program order, unique (kernels outside a
    model keep theirs, and no name is given twice)."""
    kernels = tuple(kernels)
    namer = KernelNamer()
    bases = [namer.base(k) for k in kernels]
    namer.taken = {k.name for k, b in zip(kernels, bases) if not b}
    return [namer.unique(b) if b else k.name for k, b in zip(kernels, bases)]
