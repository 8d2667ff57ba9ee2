"""Capture a decoder-only model one piece at a time: the embedding, ONE decoder layer, the
final norm and lm_head, each with torch.export; then stitch the Torch IR of N copies of
the layer between them. torch.export traces every operator of every layer (seconds for 28
layers); identical layers only need tracing once.

The stitched program is what the full capture would give, up to names: layer i's ops are
`layer{i}_<op>`, its weights `p_model_layers_{i}_<...>` (the full capture's names), the
folded tables (rotary cos / sin) are shared constants `layer_<name>`, the final pieces'
ops are `final_<op>`. Attention is causal through sdpa's is_causal, as transformers' sdpa
path does when it is given no mask.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..errors import CaptureError
from ..ir.torch_ir import TorchOp, TorchProgram
from ..ir.types import Buffer
from .capture import Captured, capture, to_numpy
from .hf import model_path


class Embed(nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.model = model_path(lm, embed_tokens=lm.model.embed_tokens).model

    def forward(self, input_ids):
        return self.model.embed_tokens(input_ids)


class FinalNormHead(nn.Module):
    def __init__(self, lm):
        super().__init__()
        parts = model_path(lm, norm=lm.model.norm, lm_head=lm.lm_head)
        self.model, self.lm_head = parts.model, parts.lm_head

    def forward(self, hidden_states):
        return self.lm_head(self.model.norm(hidden_states))


def capture_layers(lm: nn.Module, layer_module, input_ids: torch.Tensor) -> Captured:
    """`lm` has .model.embed_tokens, .model.layers, .model.norm, .lm_head (transformers'
    causal LMs and models.CausalLM); `layer_module(lm, i)` wraps layer i as
    forward(hidden_states) -> hidden_states."""
    layers = lm.model.layers
    fqn = {id(p): name for name, p in lm.named_parameters(remove_duplicate=False)}
    params = dict(lm.named_parameters(remove_duplicate=False))

    head_module = Embed(lm)
    head = capture(head_module, (input_ids,))
    (hidden,) = head.program.outputs
    hidden_type = head.program.types()[hidden]
    device = lm.model.embed_tokens.weight.device
    x = torch.zeros(hidden_type.shape, device="meta" if device.type == "meta" else "cpu",
                    dtype=getattr(torch, hidden_type.dtype))     # the embedding's (bfloat16 in a bf16 model)
    layer0 = layer_module(lm, 0)
    body = capture(layer0, (x,))
    tail_module = FinalNormHead(lm)
    tail = capture(tail_module, (x,))

    buffers: list[Buffer] = []
    values: dict[str, np.ndarray] = {}
    ops: list[TorchOp] = []
    seen: set[str] = set()

    def add(piece: Captured, module: nn.Module, prefix: str, const_prefix: str, bind: dict, layer: int | None):
        """Append `piece`'s ops renamed; `bind` maps its inputs to tensors already there.
        Returns the rename of its outputs."""
        placeholder = _param_names(module, fqn)
        rename = dict(bind)
        for b in piece.program.buffers:
            if b.kind == "input":
                continue
            if b.kind == "param":
                target = placeholder.get(b.name)
                if target is None:
                    raise CaptureError(f"cannot find the parameter behind {b.name} while stitching layers")
                if layer is not None:
                    target = target.replace("model.layers.0.", f"model.layers.{layer}.", 1)
                name = "p_" + target.replace(".", "_")
                value = None if params[target].is_meta else to_numpy(params[target])
            else:
                name = const_prefix + b.name
                value = piece.values.get(b.name)
            rename[b.name] = name
            if name not in seen:
                seen.add(name)
                buffers.append(Buffer(name, b.type, b.kind))
                if value is not None:
                    values[name] = value
        for op in piece.program.ops:
            rename[op.name] = prefix + op.name
        for op in piece.program.ops:
            ops.append(TorchOp(rename[op.name], op.op, _rename_args(op.args, rename), op.attrs, op.type))
        return [rename[o] for o in piece.program.outputs]

    (ids_name,) = head.input_names
    buffers.append(Buffer(ids_name, head.program.types()[ids_name], "input"))
    (current,) = add(head, head_module, "", "embed_", {ids_name: ids_name}, None)
    (x_name,) = body.input_names
    for i in range(len(layers)):
        (current,) = add(body, layer0, f"layer{i}_", "layer_", {x_name: current}, i)
    (t_name,) = tail.input_names
    (out,) = add(tail, tail_module, "final_", "final_", {t_name: current}, None)
    program = TorchProgram(tuple(buffers), tuple(ops), (out,))
    return Captured(program, values, (ids_name,), tail.out_spec)


def layers_identical(lm: nn.Module) -> bool:
    """Same class and parameter shapes in every layer (and no per-layer settings such as a
    sliding window differing): then tracing layer 0 describes them all."""
    layers = lm.model.layers
    first = layers[0]
    shapes = [tuple(p.shape) for p in first.parameters()]
    window = getattr(getattr(first, "self_attn", None), "sliding_window", None)
    return all(type(layer) is type(first) and [tuple(p.shape) for p in layer.parameters()] == shapes
               and getattr(getattr(layer, "self_attn", None), "sliding_window", None) == window
               for layer in layers)


def _param_names(module: nn.Module, fqn: dict) -> dict[str, str]:
    """Placeholder name torch.export gives each of `module`'s parameters -> the parameter's
    name in the whole model."""
    return {"p_" + name.replace(".", "_"): fqn[id(p)]
            for name, p in module.named_parameters(remove_duplicate=False)}


def _rename_args(args, rename: dict):
    out = []
    for a in args:
        if isinstance(a, str):
            out.append(rename.get(a, a))
        elif isinstance(a, (tuple, list)):
            out.append(type(a)(_rename_args(a, rename)))
        else:
            out.append(a)
    return tuple(out)
