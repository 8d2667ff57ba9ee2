"""Two-phase reductions (passes/split/split_reduce.py): few long rows are spread over many blocks,
partials combined in a fixed order; every backend against eager, the CUDA through nvcc."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import deplokit
from deplokit.errors import DeplokitError
from deplokit.runtime.nvcc import nvcc_available

needs_nvcc = pytest.mark.skipif(not nvcc_available(), reason="nvcc (CUDA toolkit) not installed")

ROWS = {
    "sum": lambda x: x.sum(-1),
    "mean": lambda x: x.mean(-1, keepdim=True),
    "max": lambda x: x.amax(-1),
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: F.log_softmax(x, -1),
    "rmsnorm": lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "sum_all": lambda x: x.sum(),
}


def _kernels(c):
    return [k.name for k in c.loop_ir.kernels]


def _split_notes(c):
    return [n for step in c.trace if step.name == "split_reduce" for n in step.notes]


@pytest.mark.parametrize("name", sorted(ROWS))
def test_long_rows_split_and_match_eager(name):
    torch.manual_seed(0)
    x = torch.randn(2, 9001) * 3
    c = deplokit.compile(ROWS[name], x)
    assert any("_part0" in k for k in _kernels(c)), _kernels(c)
    assert _split_notes(c) and "no atomics" in _split_notes(c)[0]
    for backend in ("tensor", "loop", "sim"):
        assert c.check(x, backend=backend).ok, (name, backend)
    # deterministic: bit-identical on a second simulator run
    a, b = c.run(x, backend="sim"), c.run(x, backend="sim")
    assert np.array_equal(np.asarray(a), np.asarray(b))


def test_knob_turns_it_off_and_chooses_the_split():
    x = torch.randn(3, 8192)
    fn = ROWS["softmax"]
    off = deplokit.compile(fn, x, config={"split_reduce.splits": 1})
    assert not any("_part" in k for k in _kernels(off))
    four = deplokit.compile(fn, x, config={"split_reduce.splits": 4})
    assert "4 x 2048" in _split_notes(four)[0]
    assert four.check(x, backend="sim").ok
    with pytest.raises(DeplokitError, match="split_reduce.splits"):
        deplokit.compile(fn, x, config={"split_reduce.splits": 0})


def test_many_rows_or_short_rows_are_not_split():
    assert not any("_part" in k for k in _kernels(deplokit.compile(ROWS["softmax"], torch.randn(512, 8192))))
    assert not any("_part" in k for k in _kernels(deplokit.compile(ROWS["softmax"], torch.randn(3, 1000))))


def test_split_count_follows_the_targets_sms():
    x = torch.randn(3, 200000)
    notes = {t: _split_notes(deplokit.compile(ROWS["sum"], x, target=t))[0] for t in ("sm_80", "sm_120")}
    assert "36 x" in notes["sm_80"] and "57 x" in notes["sm_120"], notes


def test_few_output_matmul_splits_k_without_atomics():
    torch.manual_seed(1)
    x, w = torch.randn(3, 20001), torch.randn(20001, 7)
    c = deplokit.compile(lambda x, w: x @ w, x, w)
    assert any("_part0" in k for k in _kernels(c))
    assert "atomic" not in str(c.cuda).replace("no atomics", "")
    for backend in ("tensor", "loop", "sim"):
        assert c.check(x, w, backend=backend).ok, backend


def test_softmax_then_matmul_fills_the_sms():
    """The issue's example: (3, 49999) softmax then N = 7. Unsplit, its kernels run 3 and 1
    blocks; split, every kernel that walks the long rows runs at least one block per SM of
    the target (benchmarks/bench_split_reduce.py prints the simulator's time: 25 s -> 0.3 s)."""
    torch.manual_seed(0)
    x, w = torch.randn(3, 49999), torch.randn(49999, 7)
    fn = lambda x, w: torch.softmax(x, -1) @ w   # noqa: E731

    def blocks(c):
        return {k.name: k.grid[0] * k.grid[1] * k.grid[2] for k in c.kernel_ir.kernels}

    off = deplokit.compile(fn, x, w, config={"split_reduce.splits": 1, "003_split_matmul_k.splits": 1})
    assert max(blocks(off).values()) <= 3
    on = deplokit.compile(fn, x, w)
    long = {k: n for k, n in blocks(on).items() if "_part" in k or k == "merged_softmax"}
    assert len(long) == 4 and min(long.values()) >= 132, blocks(on)
    assert on.check(x, w, backend="sim").ok and on.check(x, w, backend="loop").ok


@needs_nvcc
@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
def test_split_kernels_compile_with_nvcc(target):
    x, w = torch.randn(3, 9001), torch.randn(9001, 5)
    c = deplokit.compile(lambda x, w: F.log_softmax(x, -1) @ w + x.amax(-1, keepdim=True), x, w, target=target)
    assert any("_part0" in k for k in _kernels(c))
    c.nvcc()


def test_forced_splits_keep_a_warp_per_chunk():
    """split_reduce.splits forced high on short reductions (cumsum's 32-long chunk sums over
    50k rows) split nothing rather than launch one block per element (a fuzz timeout)."""
    x = torch.randn(49999)
    c = deplokit.compile(lambda t: torch.cumsum(t, 0), x, config={"split_reduce.splits": 256})
    assert max(k.grid[0] * k.grid[1] * k.grid[2] for k in c.kernel_ir.kernels) <= 49999
    torch.testing.assert_close(c.run(x, backend="sim"), torch.cumsum(x, 0), rtol=1e-4, atol=1e-3)
    rows = torch.randn(2, 4096)
    split = deplokit.compile(lambda t: t.sum(-1), rows, config={"split_reduce.splits": 256})
    assert any("_part0" in k.name for k in split.kernel_ir.kernels)          # 128 chunks of 32: still split


@pytest.mark.parametrize("norm", ["rms_norm", "layer_norm"])
def test_a_two_axis_normalised_shape_is_one_long_row_split_over_blocks(norm):
    # issue 29: F.rms_norm(x, (3, 20003), w) reduces 60009 elements a row; few rows must be
    # spread over blocks (a single block per row ran minutes on the simulator)
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(2, 3, 20003, generator=g), torch.randn(3, 20003, generator=g)
    fn = ((lambda x, w: F.rms_norm(x, (3, 20003), w, 1e-6)) if norm == "rms_norm"
          else (lambda x, w: F.layer_norm(x, (3, 20003), w)))
    c = deplokit.compile(fn, x, w)
    assert any("_part0" in k for k in _kernels(c)) and any("_stats" in k for k in _kernels(c)), _kernels(c)
    assert c.check(x, w, backend="sim").ok
