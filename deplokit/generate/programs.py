"""Prefill and decode programs of a causal LM with a static KV cache (docs/generation.md).

The model is captured through transformers' static-cache exporter
(`TorchExportableModuleWithStaticCache`: the cache is module state, written with
`index_copy_` at `cache_position`) with one runtime scalar, `pos`, the position of the first
token of the call: `cache_position = pos + arange(n)`. Capture turns the cache writes into
in-place writes into `state` buffers at `pos` (frontend/capture.py), so that

- the decode program (one token) is compiled once and serves every position 0..max_length-1:
  `pos` is an argument of its kernels, never a constant in them;
- a prefill program is compiled once per prompt length (cached on the Decoder);
- a Session owns the cache arrays and hands them to every call, which updates them in place.
"""
from __future__ import annotations

import contextlib
import gc

import numpy as np
import torch

from ..compilation import Compilation, resolve_backend
from ..errors import CacheFullError, CaptureError, ExecutionError, PromptTooLongError
from ..frontend.capture import capture
from ..runtime.cuda_graph import GraphStep
from ..target import get_target
from ..trace import Context

# The runtime scalar's name in every IR (`pos[0]` in index expressions).
POSITION = "pos"


class _Step(torch.nn.Module):
    """input_ids (1, n), pos (1,) -> the logits of the last of the n tokens, (1, vocab)."""

    def __init__(self, exportable):
        super().__init__()
        self.inner = exportable

    def forward(self, input_ids, pos):
        cache_position = pos + torch.arange(input_ids.shape[1])
        return self.inner(input_ids=input_ids, cache_position=cache_position)[:, -1, :]


def _exportable(model: torch.nn.Module, max_length: int):
    """transformers' static-cache wrapper of `model` (its generation config set to a static
    cache for the wrapper's sake, then restored)."""
    try:
        from transformers import GenerationConfig
        from transformers.integrations.executorch import TorchExportableModuleWithStaticCache
    except ImportError as e:   # pragma: no cover - transformers is a dependency
        raise CaptureError(f"build_decoder needs transformers' static-cache exporter: {e}") from None
    if not hasattr(model, "config") or not hasattr(model, "generation_config"):
        raise CaptureError(f"build_decoder takes a transformers causal LM, got {type(model).__name__}")
    saved = model.generation_config
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static")
    try:
        return TorchExportableModuleWithStaticCache(model, 1, max_length)
    finally:
        model.generation_config = saved


@contextlib.contextmanager
def _gc_paused():
    """The cyclic garbage collector off while a model compiles: capture and the passes make
    millions of young objects that live to the end, and collecting them over and over cost
    a tenth of compiling SmolLM2 (measured with gc.callbacks). Refcounting still frees what
    it can; the collector runs again afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class Decoder:
    """A causal LM's prefill and decode programs over one static KV cache of `max_length`."""

    def __init__(self, model: torch.nn.Module, max_length: int, target: str = "sm_90", config: dict | None = None):
        if not isinstance(max_length, int) or max_length < 1:
            raise ExecutionError(f"max_length must be a positive int, got {max_length!r}")
        model.eval()
        self.model = model
        self.max_length = max_length
        self.target = get_target(target)
        self.config = dict(config or {})
        self._step = _Step(_exportable(model, max_length))
        self._prefill: dict[int, Compilation] = {}
        self._decode: Compilation | None = None
        self.compile_count = 0      # programs compiled so far (one decode, one prefill a length)

    def _compile(self, n: int) -> Compilation:
        self.compile_count += 1
        inputs = (torch.zeros((1, n), dtype=torch.int64), torch.zeros(1, dtype=torch.int64))
        with _gc_paused():
            # the position of the call's first token is at most max_length - 1 (Session refuses more)
            captured = capture(self._step, inputs, scalars=(POSITION,), scalar_limit=self.max_length)
            return Compilation(self._step, inputs, captured, Context(self.target, self.config, True))

    @property
    def decode(self) -> Compilation:
        """The one-token program, compiled once: it serves every position (pos is an argument)."""
        if self._decode is None:
            self._decode = self._compile(1)
        return self._decode

    def prefill_program(self, prompt_length: int) -> Compilation:
        """The program for a prompt of `prompt_length` tokens, compiled once per length."""
        if not isinstance(prompt_length, int) or not 1 <= prompt_length <= self.max_length:
            raise PromptTooLongError(f"a prompt of {prompt_length} tokens does not fit the cache of "
                                     f"{self.max_length} positions")
        if prompt_length == 1:
            return self.decode
        if prompt_length not in self._prefill:
            self._prefill[prompt_length] = self._compile(prompt_length)
        return self._prefill[prompt_length]

    def session(self, backend: str = "loop", graphs: bool = True) -> "Session":
        return Session(self, backend, graphs)

    def __repr__(self) -> str:
        return (f"<Decoder {type(self.model).__name__} max_length={self.max_length} {self.target.name}: "
                f"prefill compiled for {sorted(self._prefill) or 'no'} lengths, "
                f"decode {'compiled' if self._decode is not None else 'not compiled yet'}>")


class Session:
    """One generation: the KV cache arrays (held here, updated in place by every call) and the
    position of the next token."""

    def __init__(self, decoder: Decoder, backend: str = "loop", graphs: bool = True):
        self.decoder = decoder
        self.backend = resolve_backend(backend)
        self.graphs = graphs        # cupy: the decode step as one CUDA graph (runtime/cuda_graph.py)
        self._graph = None
        self.position = 0
        self._state: dict[str, np.ndarray] = {}    # state name -> array (the same names in every program)

    def _call(self, c: Compilation, token_ids: list[int]) -> np.ndarray:
        for name in c.state_names():
            if name not in self._state:     # on cupy, device arrays that stay on the device
                self._state[name] = (c.cupy_executor().new_state()[name] if self.backend == "cupy"
                                     else np.zeros_like(c.values[name]))
        ids = torch.tensor([list(token_ids)], dtype=torch.int64)
        pos = torch.tensor([self.position], dtype=torch.int64)
        if self.backend == "cupy" and self.graphs and c is self.decoder.decode:
            # one CUDA graph a token: captured on the first decode step, then the token id and
            # the position written into its device buffers before each replay
            if self._graph is None:
                self._graph = GraphStep(c.cupy_executor(), (ids, pos), self._state)
            logits = self._graph((ids, pos))[0]
        else:
            logits = c.execute((ids, pos), backend=self.backend, state=self._state)[0]
        self.position += len(token_ids)
        return np.asarray(logits).reshape(-1)

    def prefill(self, token_ids) -> np.ndarray:
        """Run the prompt from the current position; the logits of its last token, (vocab,)."""
        token_ids = [int(t) for t in token_ids]
        if not token_ids:
            raise ExecutionError("prefill takes at least one token")
        if self.position + len(token_ids) > self.decoder.max_length:
            raise PromptTooLongError(f"{len(token_ids)} tokens from position {self.position} do not fit the cache "
                                     f"of {self.decoder.max_length} positions")
        return self._call(self.decoder.prefill_program(len(token_ids)), token_ids)

    def decode(self, token_id: int) -> np.ndarray:
        """One token at the current position (its K and V written into the cache there); the
        next token's logits, (vocab,)."""
        if self.position >= self.decoder.max_length:
            raise CacheFullError(f"position {self.position} is past the cache's last position "
                                 f"{self.decoder.max_length - 1}")
        return self._call(self.decoder.decode, [int(token_id)])


def build_decoder(model: torch.nn.Module, *, max_length: int, target: str = "sm_90", config=None) -> Decoder:
    """The prefill and decode programs of a transformers causal LM (eval, float32) with a
    static KV cache of `max_length` positions; programs compile on first use."""
    return Decoder(model, max_length, target, config)
