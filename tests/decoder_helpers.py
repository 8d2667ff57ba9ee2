"""The tiny random transformers Llama that the decode-program tests share (tests/conftest.py
builds the module-scoped `llama` and `llama_decoder` fixtures from it)."""
import pytest
import torch

MAX_LENGTH = 32     # the static KV cache's positions in the shared decoder


def tiny_llama():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval()
