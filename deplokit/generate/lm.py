"""`deplokit.load_lm`: a causal LM that generates text through deplokit's kernels.

    lm = deplokit.load_lm("smollm2-135m")                  # trained weights, offline (GGUF)
    lm = deplokit.load_lm(transformers_causal_lm, max_length=128)
    lm.generate("What is a GPU kernel?", chat=True, max_new_tokens=20)    # text in, text out
    lm.generate([1, 4093, 198], max_new_tokens=8)                           # ids in, ids out
    lm.prefill, lm.decode                                                   # ordinary Compilations

Greedy decoding over the Decoder of programs.py: one prefill program for the prompt, then
the one decode program, compiled once, called at every position with the KV cache a Session
holds. `stream` yields each token as it is chosen; `last_stats` says where the time went.
"""
from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ExecutionError, UnknownModelError, UnsupportedDtypeError
from ..frontend import pretrained
from ..frontend.hf import is_causal_lm
from ..frontend.models import MODEL_DTYPES
from ..runtime.device import gpu_available
from .programs import PromptTooLongError, build_decoder

DEFAULT_MAX_LENGTH = 256


@dataclass(frozen=True)
class GenerationStats:
    """Where one generation's time went. The first new token comes from the prefill's
    logits; each later one from a decode step."""
    backend: str
    prompt_tokens: int
    new_tokens: int
    compile_s: float            # compiling the programs this generation needed first (0 when cached)
    prefill_s: float
    decode_s: float

    @property
    def decode_steps(self) -> int:
        return max(self.new_tokens - 1, 0)

    @property
    def tokens_per_s(self) -> float:
        """New tokens per second of running (prefill and decode, compile excluded)."""
        run = self.prefill_s + self.decode_s
        return self.new_tokens / run if run > 0 else float("nan")

    def __str__(self) -> str:
        per_step = f", {self.decode_s / self.decode_steps:.3g} s per step" if self.decode_steps else ""
        compile_part = f"; compile {self.compile_s:.3g} s before" if self.compile_s else ""
        return (f"{self.new_tokens} tokens in {self.prefill_s + self.decode_s:.3g} s on {self.backend}: "
                f"{self.tokens_per_s:.3g} tokens/s; prefill {self.prompt_tokens} tokens {self.prefill_s:.3g} s, "
                f"decode {self.decode_steps} steps {self.decode_s:.3g} s{per_step}{compile_part}")


def generation_backend(backend: str | None) -> str:
    """None: cupy on a CUDA device, else the loop interpreter (the simulator, which "auto"
    means elsewhere, takes minutes a token on a real model)."""
    if backend is not None:
        return backend
    return "cupy" if gpu_available() else "loop"


def eos_ids(model) -> frozenset[int]:
    """The tokens that end a generation, as transformers' generate reads them."""
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        eos = getattr(getattr(model, "config", None), "eos_token_id", None)
    if eos is None:
        return frozenset()
    return frozenset(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))


def as_token_ids(prompt) -> list[int] | None:
    """A prompt of token ids (a list, a 1-D or (1, n) tensor or array) as a list; None for text."""
    if isinstance(prompt, str):
        return None
    try:
        ids = np.asarray(prompt.detach().cpu() if hasattr(prompt, "detach") else prompt)
    except (TypeError, ValueError):
        ids = None
    if ids is not None and ids.size == 0 and ids.ndim == 1:
        return []   # refused as an empty prompt by check_fits
    if ids is None or ids.dtype.kind not in "iu" or ids.ndim not in (1, 2) or (ids.ndim == 2 and ids.shape[0] != 1):
        raise ExecutionError("a prompt is text (str) or token ids (a list of ints, or a 1-D or (1, n) integer "
                             f"tensor), got {type(prompt).__name__}")
    return [int(t) for t in ids.reshape(-1)]


@contextlib.contextmanager
def one_torch_thread():
    """torch on one intra-op thread while the block runs (the count restored after). A greedy
    token's matmuls are too small to share: on a busy 2-core machine the second thread's
    waits made transformers' generate of 6 SmolLM2 tokens take 10 s instead of 3 s."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


class LM:
    """A causal LM compiled for generation: the prefill and decode programs of `decoder`
    (programs.Decoder) with a static KV cache of `max_length` positions, and its tokenizer."""

    def __init__(self, model, tokenizer=None, *, max_length: int = DEFAULT_MAX_LENGTH, target: str = "sm_90",
                 config: dict | None = None, name: str | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name or type(model).__name__
        self.decoder = build_decoder(model, max_length=max_length, target=target, config=config)
        self.eos = eos_ids(model)
        self.last_stats: GenerationStats | None = None
        self._last_prompt_length: int | None = None

    @property
    def max_length(self) -> int:
        return self.decoder.max_length

    # -- the programs, as ordinary Compilations --------------------------------------------

    @property
    def decode(self):
        """The one-token program (compiled on first use, once): it serves every position."""
        return self.decoder.decode

    @property
    def prefill(self):
        """The prompt program of the last generation's prompt length (prefill_program(n) for any)."""
        if self._last_prompt_length is None:
            raise ExecutionError("no prompt yet: lm.prefill is the program of the last generate's prompt; "
                                 "lm.prefill_program(n) compiles the one for n tokens")
        return self.decoder.prefill_program(self._last_prompt_length)

    def prefill_program(self, prompt_length: int):
        return self.decoder.prefill_program(prompt_length)

    # -- text <-> token ids ------------------------------------------------------------------

    def _need_tokenizer(self, what: str):
        if self.tokenizer is None:
            raise ExecutionError(f"{what} needs a tokenizer: load_lm(model, tokenizer=...) or pass token ids")
        return self.tokenizer

    def encode(self, text: str, chat: bool = False) -> list[int]:
        """The token ids of `text`; with `chat`, of a user message in the model's chat template
        (ending where the assistant's answer starts)."""
        tok = self._need_tokenizer("text")
        if not chat:
            return [int(t) for t in tok(text)["input_ids"]]
        if not getattr(tok, "chat_template", None):
            raise ExecutionError(f"{self.name} has no chat template: generate without chat")
        ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):   # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return [int(t) for t in ids]

    def text(self, token_ids) -> str:
        """The text of `token_ids`, special tokens left out."""
        return self._need_tokenizer("text").decode(list(token_ids), skip_special_tokens=True)

    # -- generation --------------------------------------------------------------------------

    def check_fits(self, prompt_length: int, max_new_tokens: int) -> None:
        """Refuse, before any work, a generation the cache cannot hold: the prompt and every new
        token but the last take one position each."""
        if prompt_length < 1:
            raise ExecutionError("the prompt is empty: give at least one token")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ExecutionError(f"max_new_tokens must be a whole number >= 1, got {max_new_tokens!r}")
        need = prompt_length + max_new_tokens - 1
        if need > self.max_length:
            raise PromptTooLongError(
                f"a prompt of {prompt_length} tokens and {max_new_tokens} new tokens need {need} cache positions; "
                f"the cache holds {self.max_length} (raise max_length, or ask for fewer tokens)")

    def stream(self, prompt_ids, max_new_tokens: int = 32, backend: str | None = None, stop_at_eos: bool = True):
        """Yield the greedy new tokens of `prompt_ids` one by one, as each is chosen; at the end
        (or when the caller stops early) `last_stats` holds the timings."""
        prompt_ids = [int(t) for t in prompt_ids]
        self.check_fits(len(prompt_ids), max_new_tokens)
        backend = generation_backend(backend)
        start = time.perf_counter()
        self.decoder.prefill_program(len(prompt_ids))
        if max_new_tokens > 1:
            self.decoder.decode   # noqa: B018 - compiled now, so that its time is not decode time
        compile_s = time.perf_counter() - start
        self._last_prompt_length = len(prompt_ids)
        session = self.decoder.session(backend)
        prefill_s = decode_s = 0.0
        produced = 0
        try:
            t = time.perf_counter()
            logits = session.prefill(prompt_ids)
            prefill_s = time.perf_counter() - t
            while True:
                token = int(np.argmax(logits))
                produced += 1
                yield token
                if produced >= max_new_tokens or (stop_at_eos and token in self.eos):
                    return
                t = time.perf_counter()
                logits = session.decode(token)
                decode_s += time.perf_counter() - t
        finally:
            self.last_stats = GenerationStats(session.backend, len(prompt_ids), produced, compile_s,
                                              prefill_s, decode_s)

    def generate(self, prompt, max_new_tokens: int = 32, backend: str | None = None, chat: bool = False,
                 stop_at_eos: bool = True):
        """Greedy generation. Text in gives the new text out; token ids in give the new token
        ids out (a list). backend: loop | sim | cupy | auto (default: cupy on a GPU, else loop).
        Stops after `max_new_tokens` or at the model's end-of-sequence token (kept in the ids)."""
        ids = as_token_ids(prompt)
        if ids is None:
            new = list(self.stream(self.encode(prompt, chat=chat), max_new_tokens, backend, stop_at_eos))
            return self.text(new)
        if chat:
            raise ExecutionError("chat=True takes a text prompt (the chat template is applied to text)")
        return list(self.stream(ids, max_new_tokens, backend, stop_at_eos))

    def reference(self, prompt_ids, max_new_tokens: int) -> list[int]:
        """transformers' own greedy generate on the same weights: the new token ids."""
        ids = torch.tensor([[int(t) for t in prompt_ids]], dtype=torch.int64)
        eos = sorted(self.eos) or None
        with torch.no_grad(), one_torch_thread():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                      do_sample=False, num_beams=1, eos_token_id=eos,
                                      pad_token_id=eos[0] if eos else None)
        return [int(t) for t in out[0, ids.shape[1]:]]

    def __repr__(self) -> str:
        return f"<LM {self.name} max_length={self.max_length} {self.decoder.target.name}>"


def agreement(got: list[int], expected: list[int]) -> int:
    """How many leading tokens of two greedy generations agree (after the first difference
    the two continue from different text, so later tokens say nothing)."""
    n = 0
    for a, b in zip(got, expected):
        if a != b:
            break
        n += 1
    return n




def load_lm(model, *, max_length: int = DEFAULT_MAX_LENGTH, target: str = "sm_90", config: dict | None = None,
            tokenizer=None, dtype=None) -> LM:
    """An LM from a model name with trained weights (`smollm2-135m`, offline), a .gguf file,
    or any transformers causal LM (eval; pass its tokenizer for text prompts). `dtype`
    (float32, bfloat16, float16, a name or a torch dtype): the weights, the KV cache, the logits
    and every activation a matmul or attention reads are stored in it, as transformers stores
    them; the arithmetic is float32 (docs/precision.md) (a named model's
    weights are dequantised to float32, then converted; a given model is converted in a copy).
    None: a named model in float32, a given one as it is."""
    want = _lm_dtype(dtype)
    if isinstance(model, str):
        loaded = pretrained.load(model)
        lm_model = loaded.model if want is None else loaded.model.to(want)
        return LM(lm_model, tokenizer if tokenizer is not None else loaded.tokenizer, max_length=max_length,
                  target=target, config=config, name=loaded.name)
    if not is_causal_lm(model):
        raise UnknownModelError(f"load_lm takes a model name, a .gguf file or a transformers causal LM "
                             f"(e.g. LlamaForCausalLM), got {type(model).__name__}")
    if want is not None and next(model.parameters()).dtype != want:
        model = copy.deepcopy(model).to(want)
    return LM(model, tokenizer, max_length=max_length, target=target, config=config)


def _lm_dtype(dtype):
    if dtype is None:
        return None
    if isinstance(dtype, str) and dtype in MODEL_DTYPES:
        return MODEL_DTYPES[dtype]
    if dtype in MODEL_DTYPES.values():
        return dtype
    raise UnsupportedDtypeError(f"load_lm: dtype {dtype!r} is not one of {', '.join(MODEL_DTYPES)}")
