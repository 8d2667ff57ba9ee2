"""Half elementwise kernels move 4 halves per access (8 bytes, a ushort4) where the float4 rule
holds in elements (005's vector loop, vector_geometry): unit stride, offset and last extent
multiples of 4. Simulated against eager (masked runs too), the CUDA spells ushort4, and nvcc's
SASS shows 64-bit global loads and stores instead of 16-bit ones."""
import pytest
import torch

import deplokit
from deplokit.ir.loop_ir import Load, Store
from deplokit.ir.tile_ir import walk
from deplokit.runtime.sass import sass_available

HALVES = [torch.bfloat16, torch.float16]


def _silu_add(x, y):
    return x * torch.sigmoid(x) + y


def _widths(c):
    k = c.tile_ir.kernels[0]
    return {(type(s).__name__, s.tensor): s.width for s, _ in walk(k.tile().body) if isinstance(s, (Load, Store))}


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("shape", [(64, 256), (7, 36)])          # (7, 36): runs of 4 past the grid's end
def test_half_elementwise_moves_four_halves_and_matches_eager(dtype, shape):
    torch.manual_seed(0)
    x, y = torch.randn(*shape).to(dtype), torch.randn(*shape).to(dtype)
    c = deplokit.compile(_silu_add, x, y, target="sm_80")
    assert set(_widths(c).values()) == {4}
    cuda = str(c.cuda)
    assert "reinterpret_cast<const ushort4*>" in cuda and "make_ushort4(" in cuda
    got = c.run(x, y, backend="sim")
    assert got.dtype == dtype
    r = c.check(backend="sim")
    assert r.passed, str(r)


def test_a_row_not_in_runs_of_four_stays_scalar():
    x, y = torch.randn(8, 30).to(torch.bfloat16), torch.randn(8, 30).to(torch.bfloat16)
    c = deplokit.compile(_silu_add, x, y, target="sm_80")
    assert "ushort4" not in str(c.cuda)
    assert c.check(backend="sim").passed


@pytest.mark.skipif(not sass_available(), reason="nvcc and cuobjdump/nvdisasm not installed")
def test_sass_moves_halves_in_64_bit_accesses():
    x = torch.randn(4096, 4096).to(torch.bfloat16)
    y = torch.randn(4096, 4096).to(torch.bfloat16)
    c = deplokit.compile(_silu_add, x, y, target="sm_80")
    kern = c.sass().kernel(c.kernel_ir.kernels[0].name)
    loads = [i.opcode for i in kern.instructions if i.base == "LDG"]
    stores = [i.opcode for i in kern.instructions if i.base == "STG"]
    assert len(loads) == 2 and all(".64" in o or ".128" in o for o in loads), loads
    assert len(stores) == 1 and all(".64" in o or ".128" in o for o in stores), stores
