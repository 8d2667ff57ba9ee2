"""The public API: compile, run, check, the trace, determinism and error messages."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import deplokit
from deplokit import DeplokitError, DynamicShapeError, ExecutionError, UnsupportedDtypeError, UnsupportedOpError


def test_run_returns_torch_tensors_shaped_like_eager():
    def f(x):
        return x.softmax(-1), (x.sum(-1), x * 2)
    x = torch.randn(3, 37)
    c = deplokit.compile(f, x)
    for backend in ("tensor", "loop", "auto"):
        out = c.run(x, backend=backend)
        eager = f(x)
        assert isinstance(out, tuple) and isinstance(out[1], tuple)
        torch.testing.assert_close(out[0], eager[0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(out[1][0], eager[1][0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(out[1][1], eager[1][1])


def test_single_output_is_a_tensor_not_a_tuple():
    c = deplokit.compile(nn.ReLU(), torch.randn(5))
    assert isinstance(c.run(torch.randn(5)), torch.Tensor)


def test_trace_records_every_step_in_order():
    from deplokit.passes.lower import LOWERING
    from deplokit.passes.schedule import SCHEDULE
    c = deplokit.compile(nn.RMSNorm(64), torch.randn(2, 64))
    assert [(s.stage, s.name) for s in c.trace] == (
        [("torch", "capture"), ("tensor", "decompose"), ("loop", "lift"), ("loop", "fuse"), ("loop", "fuse_attention"),
         ("loop", "fuse_rows"), ("loop", "split_reduce"), ("loop", "dedup")]
        + [("tile", m.name) for m in SCHEDULE] + [("kernel", p.name) for p in LOWERING] + [("cuda", "render")])
    assert [p.name for p in LOWERING] == ["001_materialize", "002_stage_copies", "003_zero_init", "004_unclash_names",
                                         "005_reconverge_warps"]
    assert c.trace[1].before is c.torch_ir and c.trace[1].after is c.tensor_ir
    # lift: one loop nest per Tensor-IR node, every intermediate stored; fuse merges them
    lifted = c.trace[2].after
    assert c.trace[2].before is c.tensor_ir and len(lifted.kernels) == len(c.tensor_ir.nodes)
    assert c.trace[3].before is lifted and c.trace[3].after is c.loop_ir and len(c.loop_ir.kernels) == 1
    # no attention, rows too short to split, no dedup
    assert not any(c.trace[i].changed for i in (4, 5, 6, 7)) and c.trace[7].after is c.loop_ir
    assert c.trace[23].after is c.tile_ir and c.trace[-2].after is c.kernel_ir and c.trace[-1].after is c.cuda
    assert c.trace[24].before is c.tile_ir     # the lowering passes follow one another
    for before, after in zip(c.trace[8:], c.trace[9:]):    # from 001 on (001 starts from the Loop IR as Tile IR)
        assert after.before is before.after      # each step starts where the last one ended


def test_check_detects_a_mismatch():
    factor = [2]
    c = deplokit.compile(lambda x: x * factor[0], torch.randn(4))     # captured with x * 2
    factor[0] = 3    # eager now disagrees
    assert not c.check().ok


def test_a_compilation_is_not_changed_after_it_is_built():
    import dataclasses
    c = deplokit.compile(lambda x: x * 2, torch.randn(4))
    kernel_ir = c.kernel_ir
    for name in ("kernel_ir", "cuda", "source", "new_field"):
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign {name}"):
            setattr(c, name, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        del c.tile_ir
    assert c.kernel_ir is kernel_ir
    # nvcc and recompile leave it as it was; recompile makes a new, equally frozen one
    again = c.recompile({})
    assert again is not c and str(again.cuda) == str(c.cuda) and c.kernel_ir is kernel_ir
    with pytest.raises(dataclasses.FrozenInstanceError):
        again.kernel_ir = kernel_ir
    c._cupy = None      # the one cache filled in on first use (the loaded CuPy kernels)


def _texts(seed):
    torch.manual_seed(seed)
    c = deplokit.compile(nn.Sequential(nn.Linear(37, 64), nn.GELU(), nn.LayerNorm(64)), torch.randn(3, 37))
    return [str(c.torch_ir), str(c.tensor_ir), str(c.loop_ir), "\n".join(c.trace[-1].notes)]


def test_printed_ir_is_deterministic():
    assert _texts(0) == _texts(1)   # weights differ, text must not


def test_printed_ir_is_identical_across_processes():
    code = ("import torch, deplokit; torch.manual_seed(0);"
            "c = deplokit.compile(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Softmax(-1)), torch.randn(3, 8));"
            "print(c.torch_ir); print(c.tensor_ir); print(c.loop_ir)")
    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.append(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                   check=True).stdout)
    assert outs[0] == outs[1] and "=== merged_" in outs[0]


def test_unsupported_op_names_it_and_lists_covered_ops():
    with pytest.raises(UnsupportedOpError) as e:
        deplokit.compile(lambda x: torch.cumprod(x, 0), torch.randn(8))
    msg = str(e.value)
    assert "cumprod" in msg and "(node cumprod" in msg and "`deplokit ops`" in msg and "rms_norm" not in msg


@pytest.mark.parametrize("fn, inputs", [
    (lambda x: x * 2, (torch.randn(8, dtype=torch.complex64),)),
    (lambda x: x.double() * 2, (torch.randn(8),)),
])
def test_unsupported_dtype(fn, inputs):
    with pytest.raises(UnsupportedDtypeError, match="float32"):
        deplokit.compile(fn, *inputs)


def test_data_dependent_shape_is_a_dynamic_shape_error():
    with pytest.raises(DynamicShapeError, match="dynamic"):
        deplokit.compile(lambda x: x[x > 0], torch.randn(8))


def test_run_rejects_wrong_inputs_and_backends():
    c = deplokit.compile(lambda x: x + 1, torch.randn(4, 5))
    with pytest.raises(ExecutionError, match=r"\(4, 5\)"):
        c.run(torch.randn(4, 6))
    with pytest.raises(ExecutionError, match="expected 1 inputs"):
        c.run()
    with pytest.raises(ExecutionError, match="supported: tensor, loop, sim"):
        c.run(torch.randn(4, 5), backend="warp")


def test_unknown_target():
    with pytest.raises(DeplokitError, match="sm_80, sm_90, sm_120"):
        deplokit.compile(lambda x: x + 1, torch.randn(4), target="sm_75")


def test_errors_share_one_family():
    for cls in (UnsupportedOpError, UnsupportedDtypeError, DynamicShapeError, ExecutionError):
        assert issubclass(cls, DeplokitError)


def test_default_atol_scales_with_output_magnitude():
    """A K=1024 matmul differs from torch only by summation order: ok by default; a 1% error
    is still caught."""
    from deplokit.compilation import DEFAULT_ATOL, _compare, default_atol
    torch.manual_seed(0)
    a, b = torch.randn(64, 1024), torch.randn(1024, 32)
    c = deplokit.compile(torch.matmul, a, b)
    res = c.check(backend="loop")
    assert res.ok, res
    want = torch.matmul(a, b)
    assert res.atol == default_atol(want) > DEFAULT_ATOL
    assert not _compare(want, want * 1.01, "loop", 1e-4, default_atol(want)).ok
    assert default_atol(torch.full((3,), 0.5)) == DEFAULT_ATOL
