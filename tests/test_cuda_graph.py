"""The decode step as one CUDA graph (runtime/cuda_graph.py): captured once, replayed per token
with the token id and the position written into device memory first. On the host, CuPy's
stream capture is stood in for (launches recorded while capturing, replayed by the graph,
each run by the simulator); on a device (@gpu), the real thing against the loop backend."""
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from deplokit.runtime.cuda_graph import GraphStep, graph_plan
from deplokit.runtime.cupy_backend import CupyExecutor
from deplokit.runtime.device import gpu_available
from deplokit.runtime.nvrtc import nvrtc_available

sys.path.insert(0, str(Path(__file__).parent))
from decoder_helpers import MAX_LENGTH  # noqa: E402
from test_cupy_host import StandInCupy  # noqa: E402


class CapturingCupy(StandInCupy):
    """The stand-in with stream capture: between begin_capture and end_capture a launch is
    recorded, not run; the graph's launch runs the recorded launches in order."""

    def __init__(self, kernel_program):
        super().__init__(kernel_program)
        self.capturing = None
        self.captures = 0
        outer = self

        class Graph:
            def __init__(self, recorded):
                self.recorded = recorded

            def upload(self, stream=None):
                pass

            def launch(self, stream=None):
                for run in self.recorded:
                    run()

        class Stream:
            def __init__(self, non_blocking=False):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def begin_capture(self, mode=None):
                assert outer.capturing is None
                outer.capturing = []

            def end_capture(self):
                recorded, outer.capturing = outer.capturing, None
                outer.captures += 1
                return Graph(recorded)

            def synchronize(self):
                pass

        self.cuda.Stream = Stream

    def function(self, launch):
        def maybe_record(grid, block, args, shared_mem=0, stream=None):
            if self.capturing is not None:
                self.capturing.append(lambda: launch(grid, block, args, shared_mem=shared_mem))
            else:
                launch(grid, block, args, shared_mem=shared_mem)
        maybe_record.ptr = launch.ptr
        return maybe_record


def executor(c, fake):
    exe = CupyExecutor(c.kernel_ir, str(c.cuda), c.input_names, c.values, c.target, cupy=fake,
                       launches=c.launches, whole=c.loop_ir, encode_tensor_map=fake.encode_tensor_map)
    exe.functions = {name: fake.function(fn) for name, fn in exe.functions.items()}
    return exe


def test_the_capture_plan_names_what_each_replay_rewrites(llama_decoder):
    c = llama_decoder.decode
    plan = graph_plan(SimpleNamespace(plan=SimpleNamespace(inputs=c.input_names, launches=c.launches or ()),
                                      state_names=c.state_names()))
    assert plan.rewritten == ("input_ids", "pos")
    assert set(plan.state) == {f"kv_cache{i}" for i in range(4)}
    assert plan.launches == len(c.launches) == 31
    assert "before each replay: input_ids, pos written into device memory" in plan.text()


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (cupy + libnvrtc) is not available")
def test_one_capture_serves_every_token_on_the_host_stand_in(llama_decoder):
    """Captured once at position 0; three replays, each after the token and the position were
    written into the graph's own input buffers, match the loop backend token for token."""
    c = llama_decoder.decode
    fake = CapturingCupy(c.kernel_ir)
    exe = executor(c, fake)
    state = exe.new_state()
    ids, pos = torch.tensor([[3]]), torch.tensor([0])
    step = GraphStep(exe, (ids, pos), state)
    assert fake.captures == 1 and fake.launches == []          # captured, nothing run yet
    want = llama_decoder.session("loop")
    token = 3
    for p in range(3):
        got = step((torch.tensor([[token]]), torch.tensor([p])))[0].numpy().reshape(-1)
        ref = want.decode(token)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
        token = int(ref.argmax())
    assert fake.captures == 1 and step.replays == 3
    assert len(fake.launches) == 3 * len(c.launches)
    # the KV cache is the session's array, written in place at positions 0..2 only
    cache = state["kv_cache0"].reshape(1, 2, MAX_LENGTH, 16)
    assert np.abs(cache[:, :, :3]).sum() > 0 and not cache[:, :, 3:].any()


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs a CUDA device")
def test_graph_decode_on_the_device_matches_the_loop_backend(llama_decoder):
    graph = llama_decoder.session("cupy")
    plain = llama_decoder.session("cupy", graphs=False)
    loop = llama_decoder.session("loop")
    prompt = [3, 17, 42]
    a, b, w = graph.prefill(prompt), plain.prefill(prompt), loop.prefill(prompt)
    for _ in range(8):
        np.testing.assert_allclose(a, w, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(b, w, rtol=1e-4, atol=1e-5)
        token = int(w.argmax())
        a, b, w = graph.decode(token), plain.decode(token), loop.decode(token)
    assert graph._graph is not None and graph._graph.replays == 8
