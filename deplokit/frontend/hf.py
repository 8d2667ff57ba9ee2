"""Glue for Hugging Face transformers (an optional extra): its causal-LM classes built from
a preset or a local config.json, with no download, and the wrapper that makes one of its
models capturable (no KV cache, the logits tensor as the only output).

Nothing here imports transformers at module load: `available()` says whether it is there.
"""
from __future__ import annotations

import glob
import json
import os

import torch

from ..errors import CaptureError
from .presets import ModelPreset

# preset.arch -> (config class, model class) names in transformers
_CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM")}


def available() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


_CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")   # LlamaForCausalLM, GPT2LMHeadModel, ...


def is_causal_lm(module) -> bool:
    """A transformers decoder-only model returning a ModelOutput with `logits`
    (LlamaForCausalLM, GPT2LMHeadModel, Gemma3ForCausalLM, ...)."""
    if not isinstance(module, torch.nn.Module) or not hasattr(module, "config"):
        return False
    if getattr(module.config, "is_encoder_decoder", False):
        return False
    return any(c.__module__.startswith("transformers.") and c.__name__.endswith(_CAUSAL_LM_SUFFIXES)
               for c in type(module).__mro__)


class LogitsOnly(torch.nn.Module):
    """forward(input_ids, attention_mask=None) -> logits of a transformers causal LM, without
    the KV cache (a DynamicCache is no tensor and torch.export cannot return it). A padded
    batch passes its attention_mask (batch, seq) of 1s and 0s as the second input.

    The wrapper shares the model's child modules rather than holding the model as a child,
    so the captured weights keep transformers' own names (p_model_layers_3_mlp_up_proj_weight,
    not p_lm_model_layers_...), and so do errors (`in model.layers.3.mlp`)."""

    def __init__(self, lm: torch.nn.Module):
        super().__init__()
        if any(True for _ in lm.named_parameters(recurse=False)) or any(True for _ in lm.named_buffers(recurse=False)):
            raise CaptureError(f"{type(lm).__name__} holds tensors outside its submodules; deplokit cannot wrap it")
        self._modules = lm._modules
        object.__setattr__(self, "lm", lm)    # not registered: its tensors are reached via _modules
        self.training = lm.training           # capture restores this mode: the model's own, not train

    def forward(self, input_ids, attention_mask=None):
        return self.lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits

    def eval(self):
        self.lm.eval()
        return super().eval()

    def train(self, mode: bool = True):
        self.lm.train(mode)
        return super().train(mode)


def model_path(lm: torch.nn.Module, index: int | None = None, **parts) -> torch.nn.Module:
    """A container holding some of `lm`'s modules at the paths they have in `lm`
    (model.layers.3, model.norm, lm_head): captured weights keep the whole model's names
    (p_model_layers_3_mlp_up_proj_weight) and errors say `in model.layers.3.mlp`."""
    root, inner = torch.nn.Module(), torch.nn.Module()
    root.model = inner
    if index is not None:
        inner.layers = torch.nn.ModuleDict({str(index): lm.model.layers[index]})
    for name, module in parts.items():
        setattr(root if name == "lm_head" else inner, name, module)
    return root


class DecoderLayerOnly(torch.nn.Module):
    """forward(hidden_states) -> one decoder layer of a transformers causal LM, with its
    rotary table computed from the sequence length (folded at capture) and causal attention."""

    def __init__(self, lm: torch.nn.Module, index: int):
        super().__init__()
        self.index = index
        self.model = model_path(lm, index, rotary_emb=lm.model.rotary_emb).model

    def forward(self, hidden_states):
        position_ids = torch.arange(hidden_states.shape[1], device=hidden_states.device).unsqueeze(0)
        cos_sin = self.model.rotary_emb(hidden_states, position_ids)
        # attention_mask=None: transformers' sdpa path then attends causally (is_causal=True)
        out = self.model.layers[str(self.index)](hidden_states, attention_mask=None, position_ids=position_ids,
                                                 position_embeddings=cos_sin)
        return out[0] if isinstance(out, tuple) else out


def config_from_preset(preset: ModelPreset):
    """The transformers config of `preset`: the local HF cache's config.json when one is
    there (~/.cache/huggingface/hub/models--ORG--NAME/snapshots/*/config.json), else the
    preset's published values. Attention is sdpa, the cache off."""
    import transformers
    config_cls = getattr(transformers, _CLASSES[preset.arch][0])
    local = local_config_path(preset.name)
    if local is not None:
        with open(local, encoding="utf-8") as f:
            values = json.load(f)
        config = config_cls.from_dict(values)
    else:
        config = config_cls(
            vocab_size=preset.vocab, hidden_size=preset.hidden, intermediate_size=preset.intermediate,
            num_hidden_layers=preset.layers, num_attention_heads=preset.heads, num_key_value_heads=preset.kv_heads,
            max_position_embeddings=preset.max_positions, rope_theta=preset.rope_theta, rms_norm_eps=preset.rms_eps,
            tie_word_embeddings=preset.tie_embeddings)
    config.use_cache = False
    config._attn_implementation = "sdpa"
    return config


def config_for(arch: str, values: dict):
    """The transformers config of `arch` (a preset arch) with `values` (config keyword
    arguments, e.g. read from a GGUF file's metadata); attention is sdpa."""
    import transformers
    config = getattr(transformers, _CLASSES[arch][0])(**values)
    config._attn_implementation = "sdpa"
    return config


def build_causal_lm(config, arch: str):
    import transformers
    model_cls = getattr(transformers, _CLASSES[arch][1])
    return model_cls(config).eval()


def local_config_path(name: str) -> str | None:
    """config.json of `name` in the local Hugging Face cache, or None (never downloads)."""
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    pattern = os.path.join(hub, "models--" + name.replace("/", "--"), "snapshots", "*", "config.json")
    found = sorted(glob.glob(pattern))
    return found[-1] if found else None
