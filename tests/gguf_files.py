"""Small GGUF files for the loader tests, written the way llama.cpp's converter writes a
transformers Llama: GGUF tensor names, q/k rows permuted for its rope, some tensors quantised."""
from __future__ import annotations

import numpy as np
import torch

gguf = __import__("pytest").importorskip("gguf")

# transformers' name (after model.layers.N.) -> GGUF's
LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
         "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def tiny_llama(seed: int = 0, tie: bool = False, vocab: int = 96):
    """A random transformers Llama small enough to write and load in a second (every matrix's
    inner size a multiple of 32, the quantisation block)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=tie, bos_token_id=1,
                         eos_token_id=2)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():   # norms away from 1, so that a wrong one shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of a q/k projection's rows."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(hf_name: str) -> str:
    stem, _, kind = hf_name.rpartition(".")
    if stem in TOP:
        return f"{TOP[stem]}.{kind}"
    _, _, layer, rest = stem.split(".", 3)
    return f"blk.{layer}.{LAYER[rest]}.{kind}"


def copy_tokenizer(w, reader) -> None:
    """The tokenizer metadata (vocabulary, merges, special tokens, chat template) of another
    GGUF file (a gguf.GGUFReader) into writer `w`."""
    f = reader.fields
    w.add_tokenizer_model(f["tokenizer.ggml.model"].contents())
    w.add_tokenizer_pre(f["tokenizer.ggml.pre"].contents())
    w.add_token_list(f["tokenizer.ggml.tokens"].contents())
    w.add_token_types(f["tokenizer.ggml.token_type"].contents())
    w.add_token_merges(f["tokenizer.ggml.merges"].contents())
    w.add_add_bos_token(bool(f["tokenizer.ggml.add_bos_token"].contents()))
    w.add_add_space_prefix(bool(f["tokenizer.ggml.add_space_prefix"].contents()))
    w.add_unk_token_id(int(f["tokenizer.ggml.unknown_token_id"].contents()))
    w.add_pad_token_id(int(f["tokenizer.ggml.padding_token_id"].contents()))
    w.add_chat_template(f["tokenizer.chat_template"].contents())


def write_llama_gguf(path, model, quant: dict | None = None, arch: str = "llama", metadata: dict | None = None,
                     skip: tuple = (), tokenizer_from=None) -> None:
    """`model` (a transformers Llama) as a GGUF file at `path`. quant: GGUF tensor-name
    substring -> GGMLQuantizationType (the first match wins; F32 otherwise). metadata: extra
    or replacing key/values (str, int or float). skip: GGUF tensor names left out.
    tokenizer_from: a GGUFReader whose tokenizer the file gets (its vocabulary size must be
    the model's)."""
    c = model.config
    w = gguf.GGUFWriter(str(path), arch)
    if tokenizer_from is not None:
        copy_tokenizer(w, tokenizer_from)
    values = {
        f"{arch}.block_count": c.num_hidden_layers, f"{arch}.context_length": c.max_position_embeddings,
        f"{arch}.embedding_length": c.hidden_size, f"{arch}.feed_forward_length": c.intermediate_size,
        f"{arch}.attention.head_count": c.num_attention_heads,
        f"{arch}.attention.head_count_kv": c.num_key_value_heads,
        f"{arch}.rope.freq_base": float(getattr(c, "rope_theta", None) or c.rope_parameters["rope_theta"]),
        f"{arch}.attention.layer_norm_rms_epsilon": float(c.rms_norm_eps), f"{arch}.vocab_size": c.vocab_size,
        "general.name": "tiny-llama", "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
    }
    values.update(metadata or {})
    for key, value in values.items():
        if isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        else:
            w.add_uint32(key, int(value))
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        g = gguf_name(name)
        if g in skip:
            continue
        a = tensor.detach().float().numpy().copy()
        if g.endswith(("attn_q.weight", "attn_k.weight")):
            a = permute(a, c.num_attention_heads if "attn_q" in g else c.num_key_value_heads)
        qtype = next((q for part, q in (quant or {}).items() if part in g), None)
        if qtype is None or a.ndim == 1:
            w.add_tensor(g, a)
        else:
            w.add_tensor(g, gguf.quantize(a, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
