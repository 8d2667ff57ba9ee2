"""A GGUF file (llama.cpp's model format) read into a transformers causal LM, offline.

The `gguf` package reads the file and dequantises every tensor (Q4_1, Q8_0, F16, F32, ...)
to float32; the transformers config comes from the file's metadata, the weights are renamed
from GGUF's names (`blk.3.attn_q.weight`) to transformers' (`model.layers.3.self_attn.
q_proj.weight`). llama.cpp's converter permutes the rows of a Llama q/k projection so that
rope rotates adjacent pairs (GPT-J style) instead of the two halves transformers rotates; the
permutation is undone here, as transformers' own GGUF loader does. What this cannot load
exactly (another architecture, rope scaling) is refused with a ModelFileError, never
approximated.

Nothing here imports `gguf` or transformers at module load.
"""
from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ModelFileError
from . import hf
from .models import params_on_meta

# general.architecture -> hf.py's preset arch (the transformers classes to build)
ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2"}

# GGUF's per-layer tensor names -> transformers' (after `model.layers.N.`)
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_LAYER_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


@dataclass(frozen=True)
class GGUFModel:
    """What a GGUF file holds: the transformers config values, the architecture and the
    float32 weights under transformers' names."""
    path: str
    arch: str                   # hf.py's preset arch: llama | qwen2
    config: dict                # transformers config keyword arguments
    state_dict: dict            # name -> float32 torch tensor
    name: str                   # general.name
    has_tokenizer: bool         # the metadata holds a vocabulary (tokenizer.ggml.tokens)


def open_reader(path: str):
    """gguf.GGUFReader on `path`; a missing, unreadable or malformed file is a ModelFileError."""
    if not os.path.exists(path):
        raise ModelFileError(f"model file not found: {path}")
    if not os.path.isfile(path):
        raise ModelFileError(f"model file {path} is not a file")
    try:
        import gguf
    except ImportError:
        raise ModelFileError("reading a GGUF model file needs the `gguf` package: pip install 'deplokit[llm]' "
                             "(or make venv)") from None
    try:
        return plain_reader_class(gguf.GGUFReader)(path)
    except (ValueError, KeyError, IndexError, TypeError, OSError) as e:
        raise ModelFileError(f"{path} is not a readable GGUF file ({type(e).__name__}: {e}); "
                             "is it truncated or corrupt? reinstall it") from None


def plain_reader_class(base):
    """`base` (a gguf.GGUFReader class) over a plain ndarray view of its memory map: the
    reader slices the file once per metadata string (98k for a 49k-token vocabulary), and a
    memmap slice costs ~10x an ndarray slice. The view keeps the map open (its base)."""
    class Reader(base):
        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, value):
            self._plain = value.view(np.ndarray)

    return Reader


@contextlib.contextmanager
def plain_reads(path: str | None = None, opened=None):
    """gguf.GGUFReader is the plain-view reader while the block runs: transformers' GGUF
    tokenizer loader (which imports gguf.GGUFReader when called) reads the file's metadata
    twice, in ~3 s instead of ~9 s for a 49k-token vocabulary. `opened`: a reader already
    made on the file at `path` (read_gguf's), handed back for that file instead of parsing its
    metadata again (readers only read: fields and tensors are views of the memory map)."""
    import gguf
    saved = gguf.GGUFReader
    plain = plain_reader_class(saved)

    def reader(file, *args, **kwargs):
        if not args and not kwargs and _same_file(file, path):
            return opened
        return plain(file, *args, **kwargs)

    gguf.GGUFReader = reader if opened is not None else plain
    try:
        yield
    finally:
        gguf.GGUFReader = saved


def _same_file(a, b) -> bool:
    try:
        return b is not None and os.path.samefile(a, b)
    except (OSError, TypeError):
        return False


def field(reader, key: str, default=None):
    """The value of metadata field `key` (a str, number or list), or `default`."""
    f = reader.fields.get(key)
    if f is None:
        return default
    try:
        return f.contents()
    except Exception as e:   # a malformed field: the file is corrupt
        raise ModelFileError(f"metadata field {key} cannot be read ({e}); the file is corrupt") from None


def config_values(reader, path: str) -> tuple[str, dict]:
    """(preset arch, transformers config kwargs) from the file's metadata."""
    gguf_arch = field(reader, "general.architecture")
    if gguf_arch not in ARCHITECTURES:
        raise ModelFileError(f"{path}: GGUF architecture {gguf_arch!r} is not supported; "
                             f"supported: {', '.join(ARCHITECTURES)}")

    def need(key):
        value = field(reader, f"{gguf_arch}.{key}")
        if value is None:
            raise ModelFileError(f"{path}: metadata field {gguf_arch}.{key} is missing")
        return value

    if field(reader, f"{gguf_arch}.rope.scaling.type") not in (None, "none") or any(
            t.name == "rope_freqs.weight" for t in reader.tensors):
        raise ModelFileError(f"{path}: rope scaling is not supported (deplokit would compute other "
                             "positions than the model was trained with)")
    heads = int(need("attention.head_count"))
    hidden = int(need("embedding_length"))
    head_dim = field(reader, f"{gguf_arch}.rope.dimension_count")
    if head_dim is not None and int(head_dim) != hidden // heads:
        raise ModelFileError(f"{path}: partial rope ({head_dim} of {hidden // heads} dimensions) is not supported")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    vocab = field(reader, f"{gguf_arch}.vocab_size") or (len(tokens.data) if tokens is not None else None)
    if vocab is None:
        raise ModelFileError(f"{path}: neither {gguf_arch}.vocab_size nor a tokenizer vocabulary says the vocab size")
    names = {t.name for t in reader.tensors}
    config = dict(
        vocab_size=int(vocab), hidden_size=hidden, intermediate_size=int(need("feed_forward_length")),
        num_hidden_layers=int(need("block_count")), num_attention_heads=heads,
        num_key_value_heads=int(field(reader, f"{gguf_arch}.attention.head_count_kv", heads)),
        max_position_embeddings=int(field(reader, f"{gguf_arch}.context_length", 2048)),
        rope_theta=float(field(reader, f"{gguf_arch}.rope.freq_base", 10000.0)),
        rms_norm_eps=float(need("attention.layer_norm_rms_epsilon")),
        tie_word_embeddings="output.weight" not in names,
    )
    for key, name in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                      ("pad_token_id", "padding_token_id")):
        value = field(reader, f"tokenizer.ggml.{name}")
        if value is not None:
            config[key] = int(value)
    return ARCHITECTURES[gguf_arch], config


def hf_name(gguf_name: str) -> str | None:
    """transformers' name of a GGUF tensor, or None for one it has no place for."""
    m = _LAYER_RE.match(gguf_name)
    if m:
        layer, part, kind = m.groups()
        return f"model.layers.{layer}.{_LAYER_NAMES[part]}.{kind}" if part in _LAYER_NAMES else None
    stem, _, kind = gguf_name.rpartition(".")
    return f"{_TOP_NAMES[stem]}.{kind}" if stem in _TOP_NAMES else None


def unpermute_rope(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation: within each head, row j*half + i (the two halves
    transformers' rope rotates together) was moved to row 2*i + j (the adjacent pairs
    llama.cpp's rope rotates)."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def read_gguf(path: str, reader=None) -> GGUFModel:
    """The config and float32 weights of the GGUF file at `path` (`reader`: open_reader(path)
    made already, or None)."""
    import gguf
    reader = open_reader(path) if reader is None else reader
    arch, config = config_values(reader, path)
    state: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:
            raise ModelFileError(f"{path}: tensor {t.name} has no place in a {arch} model")
        try:
            w = gguf.dequantize(t.data, t.tensor_type)
        except (NotImplementedError, ValueError) as e:
            raise ModelFileError(f"{path}: tensor {t.name} ({t.tensor_type.name}) cannot be dequantised: {e}") from None
        expected = tuple(int(n) for n in reversed(t.shape.tolist()))   # GGUF lists dimensions innermost first
        if w.size != int(np.prod(expected)):
            raise ModelFileError(f"{path}: tensor {t.name} holds {w.size} values, its shape {expected} needs "
                                 f"{int(np.prod(expected))}; the file is corrupt")
        w = w.reshape(expected)
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = config["num_attention_heads" if "q_proj" in name else "num_key_value_heads"]
            w = unpermute_rope(w, heads)
        state[name] = torch.from_numpy(np.array(w, dtype=np.float32))   # a copy: F32 tensors are views of the file
    return GGUFModel(path, arch, config, state, str(field(reader, "general.name", os.path.basename(path))),
                     "tokenizer.ggml.tokens" in reader.fields)


def build_model(model: GGUFModel):
    """A transformers causal LM (eval, float32) holding the weights of `model`."""
    config = hf.config_for(model.arch, model.config)
    with params_on_meta():   # no random init of 135M parameters that are replaced at once
        lm = hf.build_causal_lm(config, model.arch)
    expected = dict(lm.state_dict())
    if config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(model.state_dict))
    if missing:
        raise ModelFileError(f"{model.path}: the file lacks {len(missing)} tensor(s) of the model, e.g. {missing[0]}")
    for name, value in model.state_dict.items():
        if name not in expected:
            raise ModelFileError(f"{model.path}: tensor {name} has no place in the model")
        if tuple(expected[name].shape) != tuple(value.shape):
            raise ModelFileError(f"{model.path}: tensor {name} has shape {tuple(value.shape)}, the model's config "
                                 f"says {tuple(expected[name].shape)}")
    lm.load_state_dict(model.state_dict, strict=False, assign=True)
    if config.tie_word_embeddings:
        lm.tie_weights()
    return lm.eval()
