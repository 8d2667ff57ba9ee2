"""Runtime scalars and state buffers (docs/generation.md): a program takes a (1,) int64 `pos`
that stays an argument from the Torch IR to the CUDA, and writes module state (a cache) in
place at that position; every backend keeps the state between calls as eager does."""
import numpy as np
import pytest
import torch
from test_cupy_host import StandInCupy

import deplokit
from deplokit.errors import CaptureError, UnsupportedOpError
from deplokit.runtime.cupy_backend import CupyExecutor
from deplokit.runtime.nvrtc import nvrtc_available


class RowCache(torch.nn.Module):
    """Writes two rows at pos, pos + 1 of its buffer and sums the rows written so far."""

    def __init__(self, rows=8, width=4):
        super().__init__()
        self.register_buffer("cache", torch.zeros(rows, width))

    def forward(self, x, pos):
        self.cache.index_copy_(0, pos + torch.arange(x.shape[0]), x * 2.0)
        seen = torch.arange(self.cache.shape[0])[:, None] < pos + x.shape[0]
        return (self.cache * seen).sum(0)


@pytest.fixture(scope="module")
def compiled():
    x, pos = torch.randn(2, 4), torch.tensor([0])
    return deplokit.compile(RowCache(), x, pos, scalars=("pos",))


def test_runtime_scalar_prints_in_every_ir(compiled):
    c = compiled
    assert "# pos: (1,) int64 runtime scalar" in c.torch_ir.header()
    assert "# kv_cache0: (8, 4) float32 state" in c.torch_ir.header()
    assert "index_copy(kv_cache0, pos, mul, dim=0, offset=0)" in str(c.torch_ir)
    assert "kv_cache0_written = kv_cache0 with [pos[0] + i, j] = mul" in str(c.tensor_ir)
    assert "kv_cache0_written[pos[0] + a0, a1] = " in str(c.loop_ir)
    assert "(in place in kv_cache0)" in c.loop_ir.header()
    writer = [k for k in c.kernel_ir.kernels if any(p.name == "kv_cache0_written" and not p.const for p in k.params)]
    assert writer and any(p.name == "pos" for p in writer[0].params)
    assert "# param pos: const int64[1]" in str(c.kernel_ir)
    assert "const long long* __restrict__ pos" in str(c.cuda)


@pytest.mark.parametrize("backend", ["tensor", "loop", "sim"])
def test_state_is_written_in_place_at_the_runtime_position(compiled, backend):
    """Three calls at positions 0, 2, 4 against eager's module, which keeps its own buffer."""
    torch.manual_seed(1)
    eager = RowCache()
    state = {"kv_cache0": np.zeros((8, 4), np.float32)}
    for p in (0, 2, 4):
        x, pos = torch.randn(2, 4), torch.tensor([p])
        want = eager(x, pos)
        got = compiled.execute((x, pos), backend=backend, state=state)[0]
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(state["kv_cache0"], eager.cache.numpy())
    assert not state["kv_cache0"][6:].any()        # rows past the last write never touched


def test_run_leaves_the_compilations_initial_state(compiled):
    x, pos = torch.ones(2, 4), torch.tensor([3])
    out = compiled.run(x, pos, backend="loop")
    np.testing.assert_allclose(out.numpy(), np.full(4, 4.0))
    assert not compiled.values["kv_cache0"].any()


def test_runtime_scalar_must_be_one_int64():
    want = r"runtime scalar pos is \(2,\) int64; a runtime scalar is a \(1,\) int64 tensor"
    with pytest.raises(CaptureError, match=want):
        deplokit.compile(lambda x, pos: x + pos, torch.randn(2, 4), torch.tensor([0, 1]), scalars=("pos",))


def test_write_at_scattered_positions_is_refused():
    class Scattered(RowCache):
        def forward(self, x, pos):
            self.cache.index_copy_(0, pos + torch.tensor([0, 3]), x)
            return self.cache.sum(0)
    with pytest.raises(UnsupportedOpError, match="consecutive positions from a runtime scalar"):
        deplokit.compile(Scattered(), torch.randn(2, 4), torch.tensor([0]), scalars=("pos",))


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (cupy + libnvrtc) is not available")
def test_cupy_backend_keeps_the_state_on_the_device(compiled):
    """The CuPy executor (on the host stand-in: numpy arrays, kernels in the simulator) binds the
    in-place write to the state's device array, which a session keeps between calls."""
    c = compiled
    fake = StandInCupy(c.kernel_ir)
    c._cupy = CupyExecutor(c.kernel_ir, str(c.cuda), c.input_names, c.values, c.target, cupy=fake,
                           encode_tensor_map=fake.encode_tensor_map)
    state = c.cupy_executor().new_state()
    assert set(state) == {"kv_cache0"} and c.cupy_executor().plan.buffer("kv_cache0_written").offset is None
    torch.manual_seed(2)
    eager = RowCache()
    for p in (0, 2, 4):
        x, pos = torch.randn(2, 4), torch.tensor([p])
        want = eager(x, pos)
        got = c.execute((x, pos), backend="cupy", state=state)[0]
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(state["kv_cache0"].reshape(8, 4), eager.cache.numpy())
