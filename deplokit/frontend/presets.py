"""Built-in architecture presets: the published config values of the models deplokit
compiles by name, so `deplokit compile Qwen/Qwen2.5-7B` needs no network.

Values are those of each model's `config.json` on the Hugging Face hub."""
from __future__ import annotations

from dataclasses import dataclass


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
