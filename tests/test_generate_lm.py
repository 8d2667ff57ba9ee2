"""`deplokit.load_lm` and `deplokit generate` (generate/lm.py, cli/generate_cmd.py) on small
models: greedy tokens equal transformers' generate, text in gives text out, and every bad
input (missing or corrupt file, a prompt longer than the cache, ...) is one clear error."""
from __future__ import annotations

import pytest
import torch
from gguf_files import gguf, tiny_llama, write_llama_gguf

import deplokit
from deplokit.cli import main
from deplokit.compilation import Compilation
from deplokit.errors import ExecutionError, UnknownModelError
from deplokit.frontend import gguf_weights, pretrained
from deplokit.frontend.presets import PRETRAINED
from deplokit.generate import PromptTooLongError
from deplokit.generate.lm import GenerationStats, agreement, as_token_ids, one_torch_thread

PROMPT = [1, 5, 17, 42]


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab=128)


@pytest.fixture(scope="module")
def lm(model):
    return deplokit.load_lm(model, max_length=24)


@pytest.fixture(scope="module")
def chat_file(tmp_path_factory):
    """A tiny random Llama with SmolLM2's tokenizer and chat template (a text model that
    compiles and runs in seconds)."""
    try:
        source = gguf_weights.open_reader(pretrained.weights_path(PRETRAINED["HuggingFaceTB/SmolLM2-135M-Instruct"]))
    except deplokit.ModelFileError as e:
        pytest.skip(str(e))
    path = tmp_path_factory.mktemp("chat") / "tiny-chat.gguf"
    model = tiny_llama(vocab=len(source.fields["tokenizer.ggml.tokens"].data))
    write_llama_gguf(path, model, quant={"token_embd": gguf.GGMLQuantizationType.Q8_0}, tokenizer_from=source)
    return str(path)


def test_token_ids_in_give_transformers_greedy_ids_out(lm):
    got = lm.generate(PROMPT, max_new_tokens=8, backend="loop")
    assert got == lm.reference(PROMPT, 8) and len(got) == 8
    assert lm.generate(torch.tensor([PROMPT]), max_new_tokens=2, backend="loop") == got[:2]
    s = lm.last_stats
    assert (s.backend, s.prompt_tokens, s.new_tokens, s.decode_steps) == ("loop", 4, 2, 1)
    assert "2 tokens in" in str(s) and "prefill 4 tokens" in str(s) and "decode 1 steps" in str(s)


@pytest.mark.parametrize("dtype", ["bfloat16", torch.float16])
def test_a_half_model_generates_transformers_tokens_with_a_half_kv_cache(model, dtype):
    lm = deplokit.load_lm(model, max_length=24, dtype=dtype)
    half = lm.model.dtype
    assert half in (torch.bfloat16, torch.float16) and next(model.parameters()).dtype == torch.float32  # a copy
    got = lm.generate(PROMPT, max_new_tokens=6, backend="loop")
    assert got == lm.reference(PROMPT, 6)
    # the cache is stored in half: the write rounds the new row, the readers convert the cache
    name, short = {torch.bfloat16: ("bfloat16", "bf16"), torch.float16: ("float16", "f16")}[half]
    assert f"# kv_cache0: (1, 2, 24, 16) {name} state" in lm.decode.torch_ir.header()
    tensor_ir = str(lm.decode.tensor_ir)
    assert f"kv_cache0_written = kv_cache0 with [0, j, pos[0], l] = add_6_{short} -> (1, 2, 24, 16) {name}" \
        in tensor_ir
    assert "kv_cache0_written_f32 = convert(kv_cache0_written)" in tensor_ir
    with pytest.raises(deplokit.UnsupportedDtypeError, match="dtype 'int8' is not one of"):
        deplokit.load_lm(model, dtype="int8")


def test_the_reference_runs_on_one_torch_thread_and_gives_the_count_back(lm):
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_torch_thread():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(KeyError), one_torch_thread():     # restored when the block fails too
            raise KeyError
        assert torch.get_num_threads() == 2
        assert lm.reference(PROMPT, 2) == lm.generate(PROMPT, max_new_tokens=2, backend="loop")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(saved)


def test_prefill_and_decode_are_ordinary_compilations(lm):
    lm.generate(PROMPT, max_new_tokens=1, backend="loop")
    assert isinstance(lm.prefill, Compilation) and isinstance(lm.decode, Compilation)
    assert lm.prefill is lm.prefill_program(len(PROMPT)) and lm.prefill is not lm.decode
    assert "pos" in str(lm.decode.ir("kernel")) and lm.decode.inventory()


def test_generation_stops_at_the_end_of_sequence_token(model):
    first = deplokit.load_lm(model, max_length=24).generate(PROMPT, max_new_tokens=1, backend="loop")[0]
    saved = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = first
    try:
        lm = deplokit.load_lm(model, max_length=24)
        assert lm.generate(PROMPT, max_new_tokens=5, backend="loop") == [first]
        assert lm.generate(PROMPT, max_new_tokens=3, backend="loop", stop_at_eos=False)[0] == first
        assert len(lm.generate(PROMPT, max_new_tokens=3, backend="loop", stop_at_eos=False)) == 3
    finally:
        model.generation_config.eos_token_id = saved


def test_what_does_not_fit_the_cache_is_refused_before_compiling(model):
    lm = deplokit.load_lm(model, max_length=10)
    with pytest.raises(PromptTooLongError, match="a prompt of 8 tokens and 4 new tokens need 11 cache positions; "
                                                 "the cache holds 10"):
        lm.generate(list(range(8)), max_new_tokens=4)
    assert lm.decoder.compile_count == 0
    with pytest.raises(ExecutionError, match="max_new_tokens must be a whole number >= 1"):
        lm.generate(PROMPT, max_new_tokens=0)
    with pytest.raises(ExecutionError, match="the prompt is empty"):
        lm.generate([], max_new_tokens=2)


def test_bad_prompts_and_models(lm):
    with pytest.raises(ExecutionError, match="text needs a tokenizer"):
        lm.generate("hello")
    with pytest.raises(ExecutionError, match="a prompt is text"):
        lm.generate([[1, 2], [3, 4]])
    with pytest.raises(ExecutionError, match="a prompt is text"):
        lm.generate([0.5, 1.5])
    with pytest.raises(ExecutionError, match="chat=True takes a text prompt"):
        lm.generate(PROMPT, chat=True)
    with pytest.raises(UnknownModelError, match="load_lm takes a model name, a .gguf file or a transformers causal LM"):
        deplokit.load_lm(torch.nn.Linear(2, 2))
    with pytest.raises(UnknownModelError, match="unknown model 'no-such-model'"):
        deplokit.load_lm("no-such-model")
    with pytest.raises(UnknownModelError, match="has no trained weights"):
        deplokit.load_lm("Qwen/Qwen2.5-7B")


def test_helpers():
    assert agreement([1, 2, 3, 4], [1, 2, 5, 4]) == 2 and agreement([1, 2], [1, 2, 3]) == 2
    assert as_token_ids("text") is None and as_token_ids(torch.tensor([3, 4])) == [3, 4]
    s = GenerationStats("loop", 5, 3, 0.0, 1.0, 2.0)
    assert s.tokens_per_s == 1.0 and s.decode_steps == 2


def test_text_in_text_out_with_the_file_tokenizer_and_chat(chat_file):
    lm = deplokit.load_lm(chat_file, max_length=64)
    assert lm.tokenizer is not None and lm.name == "tiny-llama"
    ids = lm.encode("What is a GPU kernel?", chat=True)
    assert lm.tokenizer.decode(ids).startswith("<|im_start|>system\n")   # the file's chat template
    assert ids[-4:] == lm.tokenizer("<|im_start|>assistant\n")["input_ids"]
    text = lm.generate("What is a GPU kernel?", chat=True, max_new_tokens=3, backend="loop")
    assert text == lm.text(lm.reference(ids, 3))


# -- the command line ---------------------------------------------------------------------------

def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, out, err, needle):
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("deplokit") and ": error: " in lines[0], err
    assert needle in lines[0], lines[0]


def test_cli_streams_text_and_checks_it(capsys, chat_file):
    code, out, err = run_cli(capsys, "generate", chat_file, "--prompt", "Hello", "--max-new-tokens", "3",
                             "--backend", "loop", "--check")
    assert code == 0, err
    assert out.endswith("\n") and out.strip()   # the text; the check below says it is transformers' text
    assert "deplokit generate: tiny-llama: 3 tokens in" in err and "tokens/s; prefill 1 tokens" in err
    assert "check: 3 of 3 tokens agree with transformers' greedy generate in float32 (all agree)" in err


def test_cli_generates_in_bfloat16_and_checks_against_transformers_in_bfloat16(capsys, chat_file):
    code, out, err = run_cli(capsys, "generate", chat_file, "--prompt", "Hello", "--max-new-tokens", "3",
                             "--backend", "loop", "--check", "--dtype", "bfloat16")
    assert code == 0, err
    assert "check: 3 of 3 tokens agree with transformers' greedy generate in bfloat16 (all agree)" in err


def test_cli_bad_inputs(capsys, chat_file, tmp_path):
    one_line_error(*run_cli(capsys, "generate", str(tmp_path / "none.gguf"), "--prompt", "hi"),
                   "model file not found: ")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(20))
    one_line_error(*run_cli(capsys, "generate", str(bad), "--prompt", "hi"), "is not a readable GGUF file")
    one_line_error(*run_cli(capsys, "generate", "Qwen/Qwen2.5-7B", "--prompt", "hi"), "has no trained weights")
    one_line_error(*run_cli(capsys, "generate", "gpt-17", "--prompt", "hi"), "unknown model 'gpt-17'")
    one_line_error(*run_cli(capsys, "generate", chat_file, "--prompt", "What is a GPU kernel?", "--chat",
                            "--max-length", "16"), "the cache holds 16 (raise max_length")
    one_line_error(*run_cli(capsys, "generate", chat_file, "--prompt", "  "), "--prompt is empty")
    one_line_error(*run_cli(capsys, "generate", chat_file, "--prompt", "hi", "--max-new-tokens", "0"),
                   "argument --max-new-tokens: expected a whole number >= 1, got '0'")
    one_line_error(*run_cli(capsys, "generate", "--prompt", "hi"), "the following arguments are required: MODEL")
    one_line_error(*run_cli(capsys, "generate", chat_file, "--prompt", "hi", "--dtype", "int8"),
                   "argument --dtype: invalid choice: 'int8'")


def test_compile_decode_takes_a_named_model(capsys):
    one_line_error(*run_cli(capsys, "compile", "-c", "torch.randn(2) + 1", "--decode"),
                   "--decode applies to a named model")
    one_line_error(*run_cli(capsys, "compile", "smollm2-135m", "--decode", "--layer", "1"),
                   "--decode compiles the whole model's decode step, not --layer")


@pytest.mark.slow
def test_compile_decode_prints_the_inventory_without_weights(capsys):
    """A preset's decode step compiles with its weights on meta (30 layers: about a minute)."""
    code, out, err = run_cli(capsys, "compile", "smollm2-135m", "--decode", "--seq", "16", "--ir", "torch")
    assert code == 0, err
    assert "index_copy(kv_cache0, pos," in out
    assert "(transformers, weights on meta) decode step, KV cache of 16 positions: kernel inventory" in err
    # the kernel that writes layer 0's keys into the cache, named by what it computes (analysis/computes.py)
    assert "layer0_self_attn_k_proj_rope_write_kv_cache " in err and "(1, 3, 16, 64)" in err and "total: " in err
