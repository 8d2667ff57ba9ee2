"""Half precision (bf16, fp16, half weights with float32 activations) and TF32 through every
IR: storage in half, arithmetic in float32, explicit converts in the IR text, rounding to nearest
even on every store, the same numbers from every backend, tolerances from the format
(docs/precision.md)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import deplokit
from deplokit import ConfigError, UnsupportedDtypeError
from deplokit.compilation import output_scale
from deplokit.precision import rounding_tolerance, unit_roundoff
from deplokit.runtime.nvcc import compile_cuda, nvcc_available
from deplokit.runtime.rounding import round_to
from deplokit.target import TARGETS

HALVES = [torch.bfloat16, torch.float16]
BACKENDS = ("tensor", "loop", "sim")


def _rand(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def _rms_norm(x, w):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)


def _layer_norm(x, w):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, None, 1e-5)


# (name, fn, input shapes): programs every half dtype runs on every backend.
PROGRAMS = [
    ("elementwise", lambda x, y: torch.nn.functional.silu(x) * y + 1.5, [(37, 53), (37, 53)]),
    ("softmax", lambda x: torch.softmax(x, -1), [(7, 131)]),
    ("rms_norm", _rms_norm, [(5, 96), (96,)]),
    ("layer_norm", _layer_norm, [(5, 96), (96,)]),
    ("matmul", lambda a, b: a @ b, [(37, 53), (53, 29)]),
    ("linear_gelu", lambda x, w: torch.nn.functional.gelu(x @ w.t()), [(9, 64), (40, 64)]),
]


@pytest.mark.parametrize("dtype", HALVES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("name, fn, shapes", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_half_programs_match_eager_on_every_backend(dtype, name, fn, shapes):
    torch.manual_seed(0)
    inputs = [_rand(*s, dtype=dtype) for s in shapes]
    c = deplokit.compile(fn, *inputs)
    results = {}
    for backend in BACKENDS:
        r = c.check(backend=backend)
        assert r.passed, (backend, str(r))
        assert r.float32 is not None and r.float32.ok, str(r)
        out = c.run(*inputs, backend=backend)
        assert out.dtype == dtype
        results[backend] = out
    # every backend rounds at the same stores: elementwise the same bits; after a reduction
    # (summed in another order) at most one rounding apart
    u = unit_roundoff(str(dtype).replace("torch.", ""))
    for backend in ("loop", "sim"):
        if name == "elementwise":
            assert torch.equal(results["tensor"], results[backend]), backend
        a, b = results["tensor"].double(), results[backend].double()
        assert ((a - b).abs() <= 2 * u * a.abs() + 1e-6).all(), backend


def test_half_storage_and_compute_types_are_visible_in_every_ir():
    x, w = _rand(37, 53, dtype=torch.bfloat16), _rand(53, 29, dtype=torch.bfloat16)
    c = deplokit.compile(lambda x, w: torch.relu(x @ w), x, w)
    tensor = str(c.tensor_ir)
    assert "x_f32 = convert(x) -> (37, 53) float32" in tensor
    assert "relu_bf16 = convert(relu) -> (37, 29) bfloat16" in tensor
    assert "convert(in0) -> float32" in str(c.loop_ir) and "-> bfloat16" in str(c.loop_ir)
    assert "convert(" in str(c.tile_ir)
    assert "param x: const bf16[1961]" in str(c.kernel_ir)
    cuda = str(c.cuda)
    assert "#include <cuda_bf16.h>" in cuda
    assert "const __nv_bfloat16* __restrict__ x" in cuda
    assert "__float2bfloat16_rn(" in cuda
    # the matmul accumulates in float32 registers: on tensor cores (sm_90's default for half
    # operands) from the halves staged as they are, else from halves converted as they are read
    assert "float acc0" in cuda
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in cuda and "__nv_bfloat16 x_smem[" in cuda
    fma = deplokit.compile(lambda x, w: torch.relu(x @ w), x, w, config={"008_register_tile.mma": "off"})
    assert "__bfloat162float(x[" in str(fma.cuda) and "mma.sync" not in str(fma.cuda)


def test_mixed_half_weights_float32_activations():
    """A module holding bf16 weights that computes in float32 (w.float()): the weight is read as
    bf16 and converted where it is loaded; the output is float32 and matches eager closely."""
    torch.manual_seed(1)

    class Mixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(29, 53).to(torch.bfloat16))
            self.g = torch.nn.Parameter(torch.randn(29).to(torch.float16))

        def forward(self, x):
            return torch.softmax(x @ self.w.float().t(), -1) * self.g.float()

    m = Mixed()
    x = torch.randn(37, 53)
    c = deplokit.compile(m, x)
    assert {b.type.dtype for b in c.torch_ir.buffers} == {"float32", "bfloat16", "float16"}
    for backend in BACKENDS:
        r = c.check(backend=backend)
        assert r.ok and r.float32 is None, str(r)     # nothing stored in half: float32 tolerances
        assert r.max_abs_error < 1e-5


def test_explicit_cast_to_half_rounds_mid_program():
    """x.to(bfloat16) written by the user rounds there, as eager does; the value goes on in float32."""
    fn = lambda x: (x * 3.0).to(torch.bfloat16).float() * 1.001   # noqa: E731
    x = torch.randn(64) * 10
    c = deplokit.compile(fn, x)
    assert "-> (64,) bfloat16" in str(c.tensor_ir)
    for backend in BACKENDS:
        assert torch.allclose(c.run(x, backend=backend), fn(x), rtol=1e-6, atol=0), backend


def test_a_half_op_eager_rounds_and_deplokit_keeps_in_float32_is_checked_at_both_tolerances():
    # (x @ w.T).float(): eager rounds the bf16 matmul before .float(); deplokit fuses the two
    # and never rounds. check() compares with eager at bf16's tolerance (the program's half op)
    # and with the float32 reference at float32's (nothing stored in half)
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(24, 512, generator=g).bfloat16(), torch.randn(8, 512, generator=g).bfloat16()
    c = deplokit.compile(lambda x, w: (x @ w.t()).float(), x, w, target="sm_80")
    assert c.rounding_format == "bfloat16"
    result = c.check(backend="loop")
    assert result.passed and result.float32 is not None and result.float32.rtol == 1e-4
    assert result.max_abs_error > 10 * result.float32.max_abs_error     # eager's rounding, not ours


def test_a_source_that_makes_its_own_half_module_is_checked_against_a_float32_run():
    # a -c program builds its module inside the source (nn.Linear(...).to(torch.bfloat16)):
    # the float32 reference runs every torch call of it in float32, the module's weights too
    from deplokit.frontend.expression import load_expression
    program = load_expression("x0 = torch.randn(3, 100, dtype=torch.bfloat16)\n"
                              "l = nn.Linear(100, 7).to(torch.bfloat16)\nl(x0)")
    c = deplokit.compile(program.fn, *program.inputs)
    reference = c.eager_float32()
    eager = program.fn(*program.inputs)
    assert eager.dtype == torch.bfloat16 and reference.dtype == torch.float32
    assert not torch.equal(reference, eager.float())            # not eager's rounded output
    assert torch.allclose(reference, eager.float(), rtol=2e-2, atol=2e-2)
    result = c.check(backend="loop")
    assert result.passed and result.float32 is not None


def test_a_half_comparison_with_a_number_compares_in_half_as_eager():
    # eager compares a bf16 tensor with -2.2 in bf16 (-2.203125): the values between the two
    # numbers are on the other side than in float32, so the number is recorded rounded
    torch.manual_seed(0)
    x = torch.randn(4999, dtype=torch.bfloat16)
    fn = lambda x: torch.where(x < -2.2, float("-inf"), x) * (x > 1.8).float()   # noqa: E731
    c = deplokit.compile(fn, x)
    assert "lt(x, -2.203125)" in str(c.torch_ir) and "gt(x, 1.796875)" in str(c.torch_ir)
    expected = fn(x)
    between = ((x.float() < -2.2) & (x.float() >= -2.203125)).sum()
    assert between > 0                                   # the inputs hold values the rounding moves
    for backend in BACKENDS:
        got = c.run(x, backend=backend)
        assert torch.equal(got.isinf(), expected.isinf()), backend


def test_store_to_half_is_round_to_nearest_even_at_a_tie():
    """1 + 2**-8 lies halfway between bf16's 1 and 1 + 2**-7: it rounds to the even one, 1;
    1 + 3 * 2**-8 rounds up to the even 1 + 2**-6."""
    fn = lambda x: x.to(torch.bfloat16)     # noqa: E731
    x = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 3.0e38])
    c = deplokit.compile(fn, x)
    want = torch.tensor([1.0, 1 + 2 ** -6, -1.0, 2.9980e38]).to(torch.bfloat16)
    for backend in BACKENDS:
        got = c.run(x, backend=backend)
        assert torch.equal(got, fn(x)) and torch.equal(got[:3], want[:3]), backend


# -- rounding ---------------------------------------------------------------------------------

def test_bf16_rounding_matches_torch_bit_for_bit():
    torch.manual_seed(2)
    x = torch.cat([torch.randn(100000) * 100, torch.randn(1000) * 1e-39, torch.tensor(
        [0.0, -0.0, float("inf"), -float("inf"), 3.3e38, -3.39e38, 1.00390625, 1.01171875])])
    got = round_to(x.numpy(), "bfloat16")
    want = x.to(torch.bfloat16).float().numpy()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_rounding_ties_to_even_nan_and_overflow():
    # ties: the kept last bit decides
    assert round_to(np.float32(1 + 2 ** -8), "bfloat16") == 1.0
    assert round_to(np.float32(1 + 3 * 2 ** -8), "bfloat16") == 1 + 2 ** -6
    assert round_to(np.float32(1 + 2 ** -11), "float16") == 1.0
    assert round_to(np.float32(1 + 3 * 2 ** -11), "float16") == 1 + 2 ** -9
    assert round_to(np.float32(1 + 2 ** -11), "tf32") == 1.0
    assert round_to(np.float32(1 + 3 * 2 ** -11), "tf32") == 1 + 2 ** -9
    # NaN stays NaN (even one whose payload sits only in the dropped bits), inf stays inf
    payload = np.array([0x7F800001], dtype=np.uint32).view(np.float32)
    for fmt in ("bfloat16", "float16", "tf32"):
        assert np.isnan(round_to(payload, fmt)).all()
        assert np.isnan(round_to(np.float32("nan"), fmt))
        assert round_to(np.float32("inf"), fmt) == np.inf and round_to(np.float32("-inf"), fmt) == -np.inf
    # overflow: fp16's largest finite is 65504; 65520 is the tie with 2**16 and goes to inf
    assert round_to(np.float32(65519.0), "float16") == 65504.0
    assert round_to(np.float32(65520.0), "float16") == np.inf
    assert round_to(np.float32(-1e5), "float16") == -np.inf
    # bf16 keeps float32's range: the largest float32 rounds up to inf, as the device does
    assert round_to(np.float32(3.4028235e38), "bfloat16") == np.inf


def test_fp16_overflow_in_a_program_is_inf_as_eager():
    fn = lambda x: x * 1000.0     # noqa: E731
    x = torch.tensor([60.0, 70.0, -70.0, 1.0], dtype=torch.float16)
    c = deplokit.compile(fn, x)
    for backend in BACKENDS:
        got = c.run(x, backend=backend)
        assert torch.equal(got, fn(x)), backend
        assert torch.isinf(got[1:3]).all()


# -- tolerances -------------------------------------------------------------------------------

def test_tolerances_come_from_the_unit_roundoff():
    assert unit_roundoff("bfloat16") == 2 ** -8 and unit_roundoff("float16") == 2 ** -11
    assert unit_roundoff("tf32") == 2 ** -11 and unit_roundoff("float32") == 2 ** -24
    rtol, short = rounding_tolerance("bfloat16", 1)
    assert rtol == pytest.approx(4 * 2 ** -8)
    _, long = rounding_tolerance("bfloat16", 4096)
    assert long > short                                    # a longer reduction, more room
    assert rounding_tolerance("float16", 64)[0] == pytest.approx(rounding_tolerance("bfloat16", 64)[0] / 8)


def test_half_tolerance_fails_a_wrong_result():
    """The derived tolerances see a wrong answer: the right result passes, one 10% off fails."""
    x = _rand(16, 64, dtype=torch.bfloat16)
    fn = lambda x: torch.softmax(x, -1)     # noqa: E731
    c = deplokit.compile(fn, x)
    assert c.check(x, backend="tensor").passed
    rtol, per_scale = rounding_tolerance("bfloat16", c.reduction_length)
    want = fn(x).double()
    atol = per_scale * output_scale(want)
    right = c.run(x, backend="tensor")
    assert torch.allclose(right.double(), want, rtol=rtol, atol=atol)
    wrong = (right.float() * 1.1).to(torch.bfloat16)
    assert not torch.allclose(wrong.double(), want, rtol=rtol, atol=atol)


def test_tf32_is_recorded_rounded_and_checked():
    torch.manual_seed(3)
    fn = lambda a, b: torch.relu(a @ b)     # noqa: E731
    a, b = torch.randn(37, 53), torch.randn(53, 29)
    exact = deplokit.compile(fn, a, b)
    tf32 = deplokit.compile(fn, a, b, precision="tf32")
    assert "round_tf32" not in str(exact.tensor_ir) and "precision" not in str(exact.tile_ir)
    assert "a_tf32 = round_tf32(a) -> (37, 53) float32" in str(tf32.tensor_ir)
    assert "precision tf32" in str(tf32.tile_ir)
    assert all(k.precision == "tf32" for k in tf32.tile_ir.kernels)
    # on tensor cores (a precision="tf32" matmul's default on sm_90; the K tail of 5 is one k
    # step of 8 over zeros): each fragment element rounded by cvt.rna
    assert "cvt.rna.tf32.f32" in str(tf32.cuda)
    outs = {}
    for backend in BACKENDS:
        r = tf32.check(backend=backend)
        assert r.passed, str(r)
        outs[backend] = tf32.run(a, b, backend=backend)
    for backend in ("loop", "sim"):       # the same rounded operands, summed in another order
        assert torch.allclose(outs["tensor"], outs[backend], rtol=1e-5, atol=1e-5), backend
    # rounding happened: the TF32 result is not float32's, and float32's tolerance sees it
    want = fn(a, b)
    assert not torch.allclose(outs["sim"], want, rtol=1e-4, atol=1e-5)
    # and is what float32 arithmetic on TF32-rounded operands gives
    ra, rb = (torch.from_numpy(round_to(t.numpy(), "tf32")) for t in (a, b))
    assert torch.allclose(outs["sim"], fn(ra.double(), rb.double()).float(), rtol=1e-5, atol=1e-5)


def test_precision_option_is_checked():
    with pytest.raises(ConfigError, match="unknown precision"):
        deplokit.compile(lambda x: x * 2, torch.randn(4), precision="fp8")
    with pytest.raises(ConfigError, match="float32 programs"):
        deplokit.compile(lambda x: x @ x, _rand(4, 4, dtype=torch.bfloat16), precision="tf32")


# -- targets and nvcc ---------------------------------------------------------------------------

def test_bf16_on_a_target_without_it_is_refused():
    sm75 = dataclasses.replace(TARGETS["sm_80"], name="sm_75", sm=75)
    with pytest.raises(UnsupportedDtypeError, match="bfloat16 tensors need sm_80"):
        deplokit.compile(lambda x: x * 2, _rand(8, dtype=torch.bfloat16), target=sm75)
    # float16 converts on every target deplokit knows
    c = deplokit.compile(lambda x: x * 2, _rand(8, dtype=torch.float16), target=sm75)
    assert c.check(backend="tensor").passed


@pytest.mark.skipif(not nvcc_available(), reason="nvcc (CUDA toolkit) not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
def test_half_and_tf32_cuda_compiles_with_nvcc(arch):
    torch.manual_seed(4)
    x, w = _rand(37, 53, dtype=torch.bfloat16), _rand(53, 29, dtype=torch.bfloat16)
    for dtype in HALVES:
        xs, ws = x.to(dtype), w.to(dtype)
        c = deplokit.compile(lambda x, w: torch.softmax(x @ w, -1) + x[:, :29], xs, ws, target=arch)
        result = compile_cuda(str(c.cuda), arch, kernel_names=c.cuda.kernels)
        assert set(result.stats) == set(c.cuda.kernels)
    c = deplokit.compile(lambda a, b: a @ b, torch.randn(37, 53), torch.randn(53, 29), target=arch, precision="tf32")
    result = compile_cuda(str(c.cuda), arch, kernel_names=c.cuda.kernels)
    assert set(result.stats) == set(c.cuda.kernels)


# -- models and the CLI -----------------------------------------------------------------------

def test_a_bf16_model_matches_eager_in_bf16():
    """A toy Qwen2 (transformers when installed) built in bfloat16: every layer stitched from one
    traced layer, weights and logits in bf16, checked on the simulator."""
    from deplokit.frontend import models
    from deplokit.frontend.presets import PRESETS
    program = models.build(models.tiny(PRESETS["Qwen/Qwen2.5-7B"]), seq=8, weights=True, dtype="bfloat16")
    c = deplokit.compile_model(program)
    params = [b for b in c.torch_ir.buffers if b.kind == "param"]
    assert params and all(b.type.dtype == "bfloat16" for b in params)
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(5))
    r = c.check(ids, backend="sim")
    assert r.passed and r.float32 is not None, str(r)
    assert c.run(ids, backend="sim").dtype == torch.bfloat16


def test_cli_compiles_a_named_model_in_bf16(capsys):
    from deplokit.cli import main
    assert main(["compile", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "--dtype", "bfloat16", "--seq", "4",
                 "--layer", "0", "--ir", "tensor", "-v"]) == 0
    out, err = capsys.readouterr()
    assert "# hidden_states: (1, 4, 2048) bfloat16 input" in out
    assert "_input_layernorm_weight: (2048,) bfloat16 param" in out
    assert "= convert(hidden_states) -> (1, 4, 2048) float32" in out
    assert "seq 4 layer 0 bfloat16: kernel inventory" in err
    assert main(["compile", "-c", "torch.randn(4) * 2", "--dtype", "bfloat16"]) == 2
    assert "--dtype applies to a named model" in capsys.readouterr().err
    assert main(["compile", "-c", "torch.randn(8, 8) @ torch.randn(8, 8)", "--precision", "tf32", "--ir", "tile"]) == 0
    assert "precision tf32" in capsys.readouterr().out


def test_split_k_partials_of_a_half_output_stay_float32():
    """A bf16 matmul split over K adds float32 partial sums: its workspace is float32, and the
    result is the float32 program's, rounded once (a bf16 workspace rounded every partial)."""
    torch.manual_seed(6)
    a, b = _rand(4, 2048, dtype=torch.bfloat16), _rand(2048, 8, dtype=torch.bfloat16)
    c = deplokit.compile(lambda a, b: a @ b, a, b)
    split = [k.split_k for k in c.tile_ir.kernels if k.split_k is not None]
    assert split, "the schedule splits this K"
    assert c.tile_ir.types()[split[0].workspace].dtype == "float32"
    r = c.check(backend="sim")
    assert r.passed and r.float32.max_rel_error <= 2 * 2 ** -8, str(r)
    assert torch.equal(c.run(a, b, backend="sim"), c.run(a, b, backend="tensor"))
