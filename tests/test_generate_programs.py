"""Prefill and decode programs over a static KV cache (deplokit/generate/programs.py): a tiny
random Llama generates token for token with transformers, one decode compile serves every
position, and the decode program's CUDA compiles for sm_80/90/120."""
import numpy as np
import pytest
import torch
from decoder_helpers import MAX_LENGTH, tiny_llama

from deplokit.errors import DeplokitError
from deplokit.generate import CacheFullError, PromptTooLongError, build_decoder
from deplokit.runtime.nvcc import nvcc_available

transformers = pytest.importorskip("transformers")

PROMPT = [3, 17, 42, 99]


def reference(model, prompt, steps):
    """transformers' own logits with its dynamic cache: the prompt's last, then one per greedy step."""
    cache = transformers.DynamicCache(config=model.config)
    out = []
    with torch.no_grad():
        logits = model(torch.tensor([prompt]), cache=cache, use_cache=True).logits[0, -1]
        out.append(logits.numpy())
        for _ in range(steps):
            tok = int(logits.argmax())
            logits = model(torch.tensor([[tok]]), cache=cache, use_cache=True).logits[0, -1]
            out.append(logits.numpy())
    return out


def generate(decoder, backend, prompt, steps):
    s = decoder.session(backend)
    out = [s.prefill(prompt)]
    for _ in range(steps):
        out.append(s.decode(int(out[-1].argmax())))
    return s, out


def test_sixteen_decode_steps_on_the_simulator_match_transformers(llama, llama_decoder):
    want = reference(llama, PROMPT, 16)
    s, got = generate(llama_decoder, "sim", PROMPT, 16)
    assert s.position == len(PROMPT) + 16
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert [int(g.argmax()) for g in got] == [int(w.argmax()) for w in want]


def test_one_decode_compile_serves_every_position(llama, llama_decoder):
    """From a one-token prompt (the decode program itself) to the cache's last position, on the
    loop backend: the same Compilation object every step, with `pos` an argument of its kernels."""
    program = llama_decoder.decode
    compiled = llama_decoder.compile_count
    steps = MAX_LENGTH - 1
    want = reference(llama, PROMPT[:1], steps)
    s = llama_decoder.session("loop")
    got = [s.prefill(PROMPT[:1])]
    for _ in range(steps):
        assert llama_decoder.decode is program
        got.append(s.decode(int(got[-1].argmax())))
    assert s.position == MAX_LENGTH
    assert [int(g.argmax()) for g in got] == [int(w.argmax()) for w in want]
    np.testing.assert_allclose(got[-1], want[-1], rtol=1e-4, atol=1e-5)
    assert llama_decoder.compile_count == compiled         # nothing compiled while positions 0..31 ran
    # the position is a kernel argument, not a constant: each cache write reads it
    writers = [k for k in program.kernel_ir.kernels
               if any(p.name.endswith("_written") and not p.const for p in k.params)]
    assert len(writers) == 2 and all(any(p.name == "pos" for p in k.params) for k in writers)
    with pytest.raises(CacheFullError, match="position 32 is past the cache's last position 31"):
        s.decode(0)


def test_prompt_longer_than_the_cache_is_refused(llama_decoder):
    with pytest.raises(PromptTooLongError, match="33 tokens from position 0 do not fit the cache of 32"):
        llama_decoder.session("loop").prefill([1] * (MAX_LENGTH + 1))
    assert issubclass(PromptTooLongError, DeplokitError) and issubclass(CacheFullError, DeplokitError)


def test_decode_program_prints_the_cache_and_the_position(llama_decoder):
    c = llama_decoder.decode
    assert "# pos: (1,) int64 runtime scalar" in c.torch_ir.header()
    assert sum("state" in line for line in c.torch_ir.header().splitlines()) == 4    # K and V of 2 layers
    assert "kv_cache0_written = kv_cache0 with [0, j, pos[0], l] = " in str(c.tensor_ir)
    assert "kv_cache0_written[0, a0, pos[0], a1] = " in str(c.loop_ir)
    assert "const long long* __restrict__ pos" in str(c.cuda)
    # cos and sin tabulated over the positions, each row read once for both layers; the causal
    # mask a comparison with the position (its bound stops the decode attention's key loop)
    rows = [op for op in c.torch_ir.ops if op.op == "embedding" and op.args[1] == "pos"]
    assert len(rows) == 2 and all(op.args[0].endswith("_table") for op in rows)
    assert [op.args for op in c.torch_ir.ops if op.op == "key_mask"] == [("pos",)]
    assert " while " in str(c.loop_ir) and "pos[0]" in next(l for l in str(c.loop_ir).splitlines() if " while " in l)


@pytest.mark.slow
@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
def test_decode_program_compiles_with_nvcc(llama, arch):
    c = build_decoder(llama, max_length=MAX_LENGTH, target=arch).decode
    result = c.nvcc()
    assert set(result.stats) == set(c.cuda.kernels)


def other_decoder(name):
    torch.manual_seed(0)
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64)
    if name == "qwen2":     # biased q/k/v projections
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common)).eval()
    # Gemma: a scaled embedding, gelu, (1 + weight) norms
    return transformers.GemmaForCausalLM(transformers.GemmaConfig(head_dim=16, **common)).eval()


@pytest.mark.parametrize("name", ["qwen2", "gemma"])
def test_other_decoders_generate_like_transformers(name):
    """Nothing is Llama-specific: transformers' static-cache export of another decoder gives
    the same programs (loop backend, a prompt and 3 greedy steps)."""
    model = other_decoder(name)
    want = reference(model, PROMPT, 3)
    _, got = generate(build_decoder(model, max_length=12), "loop", PROMPT, 3)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_decode_compiles_without_weights_and_counts_one_row_written():
    """Parameters on the meta device (a model too big to hold): the decode program compiles,
    refuses to run, and its inventory counts the cache write as the row it stores, not the cache."""
    from deplokit.frontend.models import params_on_meta
    with params_on_meta():
        model = tiny_llama()
    c = build_decoder(model, max_length=MAX_LENGTH).decode
    assert c.missing_weights
    with pytest.raises(DeplokitError, match="no weights"):
        build_decoder(model, max_length=MAX_LENGTH).session("loop").decode(0)
    write = next(e for e in c.inventory() if e.kernel.endswith("v_proj_write_kv_cache"))
    assert write.outputs == ((1, 2, MAX_LENGTH, 16),)
    # the V projection fused in: reads x (64) and W_v (32 x 64), stores one position (2 kv heads x 16)
    assert write.bytes == (64 + 32 * 64) * 4 + 2 * 16 * 4


def test_a_second_prefill_continues_from_the_sessions_position(llama, llama_decoder):
    """pos is the first token's position: a prompt fed in two pieces gives the logits of the
    whole prompt (the second piece's queries read the first piece's keys from the cache)."""
    whole = PROMPT + [7, 8]
    want = reference(llama, whole, 0)[0]
    s = llama_decoder.session("loop")
    s.prefill(PROMPT)
    got = s.prefill(whole[len(PROMPT):])
    assert s.position == len(whole)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
