"""Whole language models by name: `deplokit compile Qwen/Qwen2.5-7B`.

A preset (presets.py) gives the architecture; the module is transformers' own class when
transformers is installed (hf.py), else deplokit's plain-torch Llama / Qwen2 below, which
uses transformers' parameter names so the two load each other's state dicts. Models built
by name hold their weights on the meta device (`params_on_meta`): a 7B model compiles
without allocating its 30 GB of weights, and such a compilation cannot run.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UnknownModelError
from . import hf
from .capture import capture as capture_program
from .presets import PRESETS, ModelPreset
from .stitch import capture_layers, layers_identical

DEFAULT_SEQ = 128
# The dtypes a named model is built in (`--dtype`): its parameters and activations.
MODEL_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ModelProgram:
    """A named model ready for `deplokit.compile_model(p)` (or `deplokit.compile(p.fn,
    *p.inputs)`, which traces every layer), like expression.Program."""
    fn: nn.Module
    inputs: tuple
    names: tuple
    source: str                 # e.g. "Qwen/Qwen2.5-7B (transformers, weights on meta) seq 128"
    preset: ModelPreset
    with_weights: bool
    lm: nn.Module | None = None         # the whole model (for capture one layer at a time)
    layer_module: object = None         # (lm, i) -> layer i as forward(hidden_states)
    layer: int | None = None            # compile this layer alone

    def capture(self):
        """Captured program: a layer alone, or the whole model with ONE layer traced and
        stitched N times (stitch.py)."""
        if self.layer is not None or not layers_identical(self.lm):
            return capture_program(self.fn, self.inputs)
        return capture_layers(self.lm, self.layer_module, self.inputs[0])


def resolve(name: str) -> ModelPreset:
    """The preset called `name` (case-insensitive; the hub name or the part after the '/')."""
    key = name.lower()
    for preset in PRESETS.values():
        if key in (preset.name.lower(), preset.name.split("/")[-1].lower()):
            return preset
    raise UnknownModelError(f"unknown model {name!r}; built-in presets: {', '.join(sorted(PRESETS))} "
                            "(or pass a .py file defining `model` and `inputs`, or -c EXPR)")


@contextlib.contextmanager
def params_on_meta():
    """Modules built inside get their parameters on the meta device (shapes only, no
    memory); buffers, such as the rotary inverse frequencies, stay real so the tables that
    depend only on shapes can still be folded at capture."""
    register = nn.Module.register_parameter

    def on_meta(module, name, param):
        register(module, name, param)
        if param is not None and not param.is_meta:
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def build(name_or_preset, seq: int = DEFAULT_SEQ, layer: int | None = None, *, backend: str = "auto",
          weights: bool = False, dtype: str = "float32") -> ModelProgram:
    """The module of a preset and its example input: token ids (1, seq) for the whole
    model, hidden states (1, seq, hidden) for `layer`. backend: transformers | plain | auto
    (transformers when installed). weights=False keeps parameters on the meta device.
    dtype: the parameters' and activations' (bfloat16 as checkpoints ship)."""
    preset = name_or_preset if isinstance(name_or_preset, ModelPreset) else resolve(name_or_preset)
    if seq < 1:
        raise UnknownModelError(f"--seq must be at least 1, got {seq}")
    if dtype not in MODEL_DTYPES:
        raise UnknownModelError(f"--dtype {dtype} is not one of {', '.join(MODEL_DTYPES)}")
    use_hf = backend == "transformers" or (backend == "auto" and hf.available())
    config = None
    if use_hf:   # a local config.json may differ from the preset: its sizes rule
        config = hf.config_from_preset(preset)
        preset = replace(preset, layers=config.num_hidden_layers, hidden=config.hidden_size)
    if layer is not None and not 0 <= layer < preset.layers:
        raise UnknownModelError(f"--layer {layer} is out of range: {preset.name} has layers 0..{preset.layers - 1}")
    with contextlib.nullcontext() if weights else params_on_meta():
        lm = hf.build_causal_lm(config, preset.arch) if use_hf else CausalLM(preset).eval()
        lm = lm.to(MODEL_DTYPES[dtype])
    if layer is None:
        module = hf.LogitsOnly(lm) if use_hf else lm
        inputs = (torch.zeros(1, seq, dtype=torch.int64),)
        names = ("input_ids",)
    else:
        module = hf.DecoderLayerOnly(lm, layer) if use_hf else LayerOnly(lm, layer)
        # on meta with the weights: a layer has no embedding to carry its activations there
        inputs = (torch.zeros(1, seq, preset.hidden, device="cpu" if weights else "meta", dtype=MODEL_DTYPES[dtype]),)
        names = ("hidden_states",)
    what = f"{preset.name} ({'transformers' if use_hf else 'plain torch'}"
    what += ", random weights)" if weights else ", weights on meta)"
    what += f" seq {seq}" + (f" layer {layer}" if layer is not None else "")
    what += f" {dtype}" if dtype != "float32" else ""
    return ModelProgram(module.eval(), inputs, names, what, preset, weights, lm,
                        hf.DecoderLayerOnly if use_hf else LayerOnly, layer)


def tiny(preset: ModelPreset, **sizes) -> ModelPreset:
    """The same architecture at toy sizes (tests): 2 layers, hidden 64, 4 heads, 2 kv heads."""
    defaults = dict(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=96, vocab=128, max_positions=64)
    defaults.update(sizes)
    return replace(preset, name=preset.name + "-tiny", **defaults)


# -- plain-torch Llama / Qwen2 (transformers' names and arithmetic) --------------------------------

class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x):
        """cos, sin of shape (seq, head_dim) for x (batch, seq, ...): they depend only on
        the length, so capture folds them. Made on x's device (meta when the weights are)."""
        freqs = torch.arange(x.shape[1], dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.device), emb.sin().to(x.device)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, p: ModelPreset):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = p.heads, p.kv_heads, p.head_dim
        self.q_proj = nn.Linear(p.hidden, p.heads * p.head_dim, bias=p.qkv_bias)
        self.k_proj = nn.Linear(p.hidden, p.kv_heads * p.head_dim, bias=p.qkv_bias)
        self.v_proj = nn.Linear(p.hidden, p.kv_heads * p.head_dim, bias=p.qkv_bias)
        self.o_proj = nn.Linear(p.heads * p.head_dim, p.hidden, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(attn.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, p: ModelPreset):
        super().__init__()
        self.gate_proj = nn.Linear(p.hidden, p.intermediate, bias=False)
        self.up_proj = nn.Linear(p.hidden, p.intermediate, bias=False)
        self.down_proj = nn.Linear(p.intermediate, p.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, p: ModelPreset):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(p.hidden, eps=p.rms_eps)
        self.self_attn = Attention(p)
        self.post_attention_layernorm = nn.RMSNorm(p.hidden, eps=p.rms_eps)
        self.mlp = MLP(p)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, p: ModelPreset):
        super().__init__()
        self.embed_tokens = nn.Embedding(p.vocab, p.hidden)
        self.layers = nn.ModuleList(DecoderLayer(p) for _ in range(p.layers))
        self.norm = nn.RMSNorm(p.hidden, eps=p.rms_eps)
        self.rotary_emb = RotaryEmbedding(p.head_dim, p.rope_theta)

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb(x)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class CausalLM(nn.Module):
    """forward(input_ids (batch, seq) int64) -> logits (batch, seq, vocab)."""

    def __init__(self, p: ModelPreset):
        super().__init__()
        self.model = Decoder(p)
        self.lm_head = nn.Linear(p.hidden, p.vocab, bias=False)
        if p.tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids))


class LayerOnly(nn.Module):
    """forward(hidden_states) -> decoder layer `index` of a CausalLM (at its own path,
    model.layers.{index}, so its weights keep their names)."""

    def __init__(self, lm: CausalLM, index: int):
        super().__init__()
        self.index = index
        self.model = hf.model_path(lm, index, rotary_emb=lm.model.rotary_emb).model

    def forward(self, hidden_states):
        cos, sin = self.model.rotary_emb(hidden_states)
        return self.model.layers[str(self.index)](hidden_states, cos, sin)
