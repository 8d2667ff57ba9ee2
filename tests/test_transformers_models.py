"""Tiny random-config transformers models compile whole and match transformers.

Each architecture is built from transformers' own config class at toy sizes (seeded, eval
mode) and compiled whole; the simulator runs the emitted kernels and its logits (BERT: its
last hidden state) are compared with transformers'. Two shapes each: a base one (head_dim 16,
vocab 128, one unpadded sequence) and an odd one (head_dim 24, vocab 131, a padded batch
of two, so the attention mask is built from `attention_mask`: right-padded, then
left-padded on fresh ids). The CUDA of the odd shape passes nvcc where nvcc is installed.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

import deplokit
from deplokit.runtime.nvcc import nvcc_available

transformers = pytest.importorskip("transformers")


@dataclass(frozen=True)
class Dims:
    hidden: int
    heads: int
    kv_heads: int
    vocab: int
    seq: int
    batch: int
    layers: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


BASE = Dims(hidden=64, heads=4, kv_heads=2, vocab=128, seq=8, batch=1, layers=2)
ODD = Dims(hidden=48, heads=2, kv_heads=1, vocab=131, seq=5, batch=2, layers=1)


def _cls(name: str):
    """A transformers class, or a skip where this transformers predates it."""
    if not hasattr(transformers, name):
        pytest.skip(f"transformers {transformers.__version__} has no {name}")
    return getattr(transformers, name)


def _decoder(config_cls: str, model_cls: str, own_head_dim: bool = False, **settings):
    """A Llama-style config: hidden, heads, kv heads, intermediate, layers, vocab (and
    head_dim for the families where it is a setting of its own: Gemma, Qwen3)."""
    def build(d: Dims):
        extra = dict(settings, **({"head_dim": d.head_dim} if own_head_dim else {}))
        config = _cls(config_cls)(
            hidden_size=d.hidden, num_attention_heads=d.heads, num_key_value_heads=d.kv_heads,
            intermediate_size=2 * d.hidden - 16, num_hidden_layers=d.layers, vocab_size=d.vocab,
            max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, **extra)
        return _cls(model_cls)(config)
    return build


def _gpt2(d: Dims):
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_embd=d.hidden, n_head=d.heads, n_layer=d.layers, vocab_size=d.vocab, n_positions=64,
        bos_token_id=1, eos_token_id=2))


def _gptj(d: Dims):
    return transformers.GPTJForCausalLM(transformers.GPTJConfig(
        n_embd=d.hidden, n_head=d.heads, n_layer=d.layers, vocab_size=d.vocab, n_positions=64,
        rotary_dim=d.head_dim // 2, bos_token_id=1, eos_token_id=2))


def _neox(d: Dims):
    return transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
        hidden_size=d.hidden, num_attention_heads=d.heads, intermediate_size=2 * d.hidden,
        num_hidden_layers=d.layers, vocab_size=d.vocab, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=2))


def _falcon(d: Dims):
    return transformers.FalconForCausalLM(transformers.FalconConfig(
        hidden_size=d.hidden, num_attention_heads=d.heads, num_hidden_layers=d.layers,
        vocab_size=d.vocab, bos_token_id=1, eos_token_id=2))


def _bert(d: Dims):
    config = transformers.BertConfig(
        hidden_size=d.hidden, num_attention_heads=d.heads, intermediate_size=2 * d.hidden,
        num_hidden_layers=d.layers, vocab_size=d.vocab, max_position_embeddings=64)
    return transformers.BertModel(config, add_pooling_layer=False)


MODELS = {
    "gpt2": _gpt2,
    "gpt-neox": _neox,
    "gpt-j": _gptj,
    "phi3": _decoder("Phi3Config", "Phi3ForCausalLM"),
    "mistral": _decoder("MistralConfig", "MistralForCausalLM"),
    "gemma2": _decoder("Gemma2Config", "Gemma2ForCausalLM", own_head_dim=True),
    "gemma3": _decoder("Gemma3TextConfig", "Gemma3ForCausalLM", own_head_dim=True),
    "qwen3": _decoder("Qwen3Config", "Qwen3ForCausalLM", own_head_dim=True),
    "olmo2": _decoder("Olmo2Config", "Olmo2ForCausalLM"),
    "olmo(clip_qkv)": _decoder("OlmoConfig", "OlmoForCausalLM", clip_qkv=0.5),   # in-place clamp_
    "falcon": _falcon,
    "stablelm": _decoder("StableLmConfig", "StableLmForCausalLM"),
    "cohere": _decoder("CohereConfig", "CohereForCausalLM"),
    "glm4": _decoder("Glm4Config", "Glm4ForCausalLM"),
    "bert": _bert,
}


def _inputs(d: Dims, seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, d.vocab, (d.batch, d.seq), generator=g)
    if d.batch == 1:
        return (ids,)
    mask = torch.ones(d.batch, d.seq, dtype=torch.int64)
    # the second sequence is two tokens shorter: padded on the right (seed 0), or on the left as
    # for generation (seed 1), where the padded queries see no key at all
    if seed == 0:
        mask[1:, d.seq - 2:] = 0
    else:
        mask[1:, :2] = 0
    return ids, mask


def _program(name: str, d: Dims):
    torch.manual_seed(0)
    model = MODELS[name](d).eval()
    if name == "bert":
        return lambda input_ids, attention_mask=None: model(
            input_ids=input_ids, attention_mask=attention_mask).last_hidden_state, model
    return model, model


def _reference(name, model, inputs):
    with torch.no_grad():
        if name == "bert":
            return model(*inputs).last_hidden_state
        kwargs = {"attention_mask": inputs[1]} if len(inputs) > 1 else {}
        return model(input_ids=inputs[0], use_cache=False, **kwargs).logits


@pytest.mark.parametrize("dims", [BASE, ODD], ids=["base", "odd"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_tiny_model_matches_transformers_on_the_simulator(name, dims):
    program, model = _program(name, dims)
    inputs = _inputs(dims, 0)
    c = deplokit.compile(program, *inputs, dedup=True)
    want = _reference(name, model, inputs)
    width = dims.hidden if name == "bert" else dims.vocab
    assert want.shape == (dims.batch, dims.seq, width)
    got = c.run(*inputs, backend="sim")
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    # fresh token ids (and left padding): nothing that depends on the input was folded into a constant
    fresh = _inputs(dims, 1)
    torch.testing.assert_close(c.run(*fresh, backend="sim"), _reference(name, model, fresh), rtol=1e-4, atol=1e-5)
    if dims is ODD and nvcc_available():   # nvcc once per model (3 s each), at the shape odd sizes break
        assert c.nvcc().arch == "sm_90"


def test_padding_changes_the_logits():
    """The padded batch really exercises the mask: without it the short sequence's logits differ."""
    program, model = _program("mistral", ODD)
    ids, mask = _inputs(ODD, 0)
    masked = deplokit.compile(program, ids, mask, dedup=True).run(ids, mask, backend="loop")
    unmasked = _reference("mistral", model, (ids, torch.ones_like(mask)))
    # the padded row attends to fewer keys only where padding sits before it: none here (right
    # padding), but the padded positions themselves see masked keys
    assert (masked[1, -1] - unmasked[1, -1]).abs().max() > 1e-3
    torch.testing.assert_close(masked[0], unmasked[0], rtol=1e-4, atol=1e-5)
