"""cumsum in linear time (passes/decompose/cumsum.py): long rows as a blocked scan whose
every output sums a bounded number of terms, exact for integers, deterministic, within the
reductions' float tolerance of eager, through every backend and nvcc."""
import pytest
import torch

import deplokit
from deplokit.ir.loop_ir import Loop, walk
from deplokit.passes.decompose.cumsum import CHUNK, DIRECT
from deplokit.runtime.nvcc import nvcc_available

BACKENDS = ("tensor", "loop", "sim")
G = torch.Generator().manual_seed(0)

# (shape, dim, dtype): rows at and past DIRECT, a row of CHUNK**2 + 1 (three levels),
# scans along a middle and a leading axis, odd extents, 65k-long rows.
CASES = {
    "short(3,37)": ((3, 37), -1, torch.float32),
    "direct edge(2,64)": ((2, DIRECT), -1, torch.float32),
    "one past(2,65)": ((2, DIRECT + 1), -1, torch.float32),
    "odd(3,1000)": ((3, 1000), -1, torch.float32),
    "levels(1,1025)": ((1, CHUNK * CHUNK + 1), -1, torch.float32),
    "dim0(129,3)": ((129, 3), 0, torch.float32),
    "middle(2,129,3)": ((2, 129, 3), 1, torch.float32),
    "1d(4097)": ((4097,), 0, torch.float32),
    "long(2,65536)": ((2, 65536), -1, torch.float32),
    "int64(3,1000)": ((3, 1000), -1, torch.int64),
    "int64 dim0(1000,2)": ((1000, 2), 0, torch.int64),
    "bool(2,65537)": ((2, 65537), -1, torch.bool),
}


def _input(shape, dtype):
    if dtype == torch.float32:
        return torch.randn(*shape, generator=G)
    if dtype == torch.bool:
        return torch.rand(*shape, generator=G) < 0.5
    return torch.randint(-1000, 1000, shape, generator=G)


def _compile(shape, dim, dtype):
    x = _input(shape, dtype)
    return deplokit.compile(lambda t: torch.cumsum(t, dim), x), x


@pytest.mark.parametrize("name", CASES)
def test_cumsum_matches_eager_on_every_backend(name):
    shape, dim, dtype = CASES[name]
    c, x = _compile(shape, dim, dtype)
    want = torch.cumsum(x, dim)
    for backend in BACKENDS:
        got = c.run(x, backend=backend)
        assert got.dtype == want.dtype and got.shape == want.shape, backend
        if dtype != torch.float32:
            assert torch.equal(got, want), backend          # integers: exact
        else:
            # float sums in another order: the reductions' tolerance, scaled by the
            # prefix sums' magnitude (eager's own sequential rounding grows with it)
            scale = float(torch.cumsum(x.abs().double(), dim).max())
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6 * scale, msg=backend)


def _terms_per_output(kernel) -> int:
    """Reduce-loop iterations each point of a kernel's free loops runs (summed over loops)."""
    return sum(lp.extent for lp, _ in walk(kernel.body) if isinstance(lp, Loop) and lp.kind == "reduce")


@pytest.mark.parametrize("length", (1000, 65536, 300_000))
def test_every_output_sums_a_bounded_number_of_terms(length):
    """Linear time: each output element reads at most a few CHUNKs of terms (one per level
    of the scan), not the whole prefix (the masked sum over the row costs length**2)."""
    c = deplokit.compile(lambda t: torch.cumsum(t, -1), torch.zeros(1, length))
    levels = 1
    while length > DIRECT:
        length, levels = -(-length // CHUNK), levels + 1
    for k in c.loop_ir.kernels:
        assert _terms_per_output(k) <= levels * max(CHUNK, DIRECT), (k.name, _terms_per_output(k))


def test_cumsum_is_bit_identical_run_to_run():
    c, x = _compile((2, 5000), -1, torch.float32)
    a, b = c.run(x, backend="sim"), c.run(x, backend="sim")
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_position_ids_from_a_long_padding_mask():
    """attention_mask.cumsum(-1) - 1 (transformers' position ids) on a 5000-token batch."""
    mask = torch.ones(2, 5000, dtype=torch.int64)
    mask[1, 3000:] = 0
    c = deplokit.compile(lambda m: (m.cumsum(-1) - 1).masked_fill(m == 0, 1), mask)
    assert torch.equal(c.run(mask, backend="sim"), (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1))


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("name", ("long(2,65536)", "int64 dim0(1000,2)", "middle(2,129,3)"))
def test_cumsum_passes_nvcc(name):
    c, _ = _compile(*CASES[name])
    c.nvcc()           # raises NvccError when nvcc rejects the text
