"""A program's launches as one CUDA graph, captured once and replayed per call (a decode step).

A decode step of a 30-layer model is a few hundred small launches; launched one by one from
Python, the host's per-launch cost (~5-10 us) exceeds the kernels' own time. Captured once
into a CUDA graph (stream capture: the launches are recorded, not run), a step is one
`cudaGraphLaunch`. A graph replays its kernels with the arguments they were captured with,
so every buffer is fixed at capture:

- the program's inputs (the token id, the position `pos`) get device buffers of their own,
  rewritten before each replay: that is why a runtime scalar is a pointer to device memory,
  never a by-value argument (docs/generation.md);
- the state (the KV cache) is the session's device arrays, updated in place by the kernels;
- temporaries sit in the arena allocated once, outputs in buffers read back after the replay;
- a TMA kernel's tensor maps are encoded once, for those fixed addresses.

`GraphStep.plan` says which buffers are rewritten per call and how many launches one replay
runs (host-testable: tests/test_cuda_graph.py runs the whole thing on a stand-in for CuPy).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ExecutionError
from .cupy_backend import half_to_storage


@dataclass(frozen=True)
class GraphPlan:
    """What one replay does: `rewritten` input buffers written from the host first, then
    `launches` kernels in one graph launch; `state` arrays the kernels update in place."""
    rewritten: tuple[str, ...]
    state: tuple[str, ...]
    launches: int

    def text(self) -> str:
        state = ", ".join(self.state) or "nothing"
        return (f"one CUDA graph of {self.launches} launches a call; before each replay: "
                f"{', '.join(self.rewritten)} written into device memory; in place: {state}")


def graph_plan(executor) -> GraphPlan:
    return GraphPlan(tuple(executor.plan.inputs), tuple(executor.state_names), len(executor.plan.launches))


class GraphStep:
    """`executor`'s launches captured once over `state` (from executor.new_state()); calling
    it with inputs of the captured shapes rewrites the input buffers and replays the graph."""

    def __init__(self, executor, example_inputs, state: dict):
        self.executor = executor
        self.cupy = cp = executor.cupy
        self.plan = graph_plan(executor)
        # host copies: prepare then uploads each input into a device buffer the graph owns
        self.bufs = executor.prepare([_on_host(t) for t in example_inputs], state)
        self.stream = cp.cuda.Stream(non_blocking=True)
        with self.stream:
            self.stream.begin_capture()
            try:
                executor.launch(self.bufs)
            finally:
                graph = self.stream.end_capture()
        self.graph = graph
        self.graph.upload(self.stream)
        self.replays = 0

    def __call__(self, inputs) -> list[torch.Tensor]:
        plan = self.executor.plan
        if len(inputs) != len(plan.inputs):
            raise ExecutionError(f"expected {len(plan.inputs)} inputs ({', '.join(plan.inputs)}), got {len(inputs)}")
        for name, t in zip(plan.inputs, inputs):
            spec = plan.buffer(name)
            got = str(t.dtype).replace("torch.", "")
            if tuple(t.shape) != spec.shape or got != spec.dtype:
                raise ExecutionError(f"input {name} has shape {tuple(t.shape)} {got}; the graph was captured for "
                                     f"{spec.shape} {spec.dtype}")
            host = _on_host(t)
            host = host.float().numpy() if host.dtype in (torch.bfloat16, torch.float16) else host.numpy()
            if spec.device_dtype in ("bfloat16", "float16"):
                host = half_to_storage(host, spec.device_dtype)
            write(self.bufs[name], np.ascontiguousarray(host).reshape(-1), self.stream)
        self.graph.launch(self.stream)
        self.stream.synchronize()
        self.replays += 1
        return self.executor.outputs(self.bufs, on_device=False)


def write(device_array, host: np.ndarray, stream) -> None:
    """Host values into an existing device buffer, in order on `stream` (CuPy's ndarray.set;
    a stand-in's numpy array is written directly)."""
    if hasattr(device_array, "set"):
        device_array.set(host.astype(device_array.dtype, copy=False), stream=stream)
    else:
        device_array[...] = host


def _on_host(t: torch.Tensor) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ExecutionError(f"a graph step takes torch tensors, got {type(t).__name__}")
    return t.detach().cpu()
