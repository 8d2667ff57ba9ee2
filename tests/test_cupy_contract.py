"""What the CuPy backend must get right that no host-side run would notice, checked without
a GPU: CuPy passes arrays to kernels as bare pointers, so the element type of every argument
must be what the kernel's C parameter points to; device inputs must sit on a 16-byte
boundary for float4 / cp.async / TMA; and the FP32 matmul switch for torch's timings must
work with both of torch's TF32 APIs."""
import pytest
import torch
from programs import config_of, corpus

import deplokit
from deplokit.runtime.bench import fp32_matmuls
from deplokit.runtime.cupy_backend import DEVICE_ALIGN, device_ready
from deplokit.runtime.launch_plan import LaunchPlanError, build_plan
from deplokit.runtime.nvrtc import compile_nvrtc, nvrtc_available
from deplokit.runtime.signature import check_plan_matches_source, kernel_signatures

PROGRAMS = corpus()


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_launch_arguments_match_the_kernel_signatures(name, target):
    fn, inputs = PROGRAMS[name]
    c = deplokit.compile(fn, *inputs, target=target, config=config_of(PROGRAMS[name]))
    plan = build_plan(c.kernel_ir, c.input_names, c.target)
    source = str(c.cuda)
    check_plan_matches_source(plan, source)
    sigs = kernel_signatures(source)
    assert sorted(sigs) == sorted(k.name for k in c.kernel_ir.kernels)
    for ln in plan.launches:
        assert tuple(p.name for p in sigs[ln.name]) == ln.args
    if nvrtc_available():       # the compiler the CuPy backend uses, on the very same source
        cubin = compile_nvrtc(source, target).cubin
        assert all(k.name.encode() in cubin for k in c.kernel_ir.kernels)


def _embedding_program():
    c = deplokit.compile(lambda ids, w: torch.nn.functional.embedding(ids, w) * 2.0,
                         torch.randint(0, 10, (6,)), torch.randn(10, 16))
    return c, build_plan(c.kernel_ir, c.input_names, c.target), str(c.cuda)


def test_signatures_read_pointee_types():
    c, plan, source = _embedding_program()
    (name,) = [k.name for k in c.kernel_ir.kernels]
    pointees = {p.name: p.pointee for p in kernel_signatures(source)[name]}
    assert pointees["ids"] == "long long" and pointees["w"] == "float"
    assert plan.buffer("ids").device_dtype == "int64"


def test_a_wrong_element_type_is_caught_before_launch():
    c, plan, source = _embedding_program()
    bad = source.replace("const long long* __restrict__ ids", "const int* __restrict__ ids")
    assert bad != source
    with pytest.raises(LaunchPlanError, match=r"int\* ids but the launch passes buffer ids stored as int64"):
        check_plan_matches_source(plan, bad)


def test_a_missing_parameter_or_kernel_is_caught_before_launch():
    c, plan, source = _embedding_program()
    (name,) = [k.name for k in c.kernel_ir.kernels]
    dropped = source.replace("const long long* __restrict__ ids, ", "")
    with pytest.raises(LaunchPlanError, match=f"kernel {name} takes 2 parameters; the launch passes 3"):
        check_plan_matches_source(plan, dropped)
    renamed = source.replace(f"void {name}(", f"void {name}_v2(")
    with pytest.raises(LaunchPlanError, match=f"declares no extern \"C\" __global__ {name}; declared: {name}_v2"):
        check_plan_matches_source(plan, renamed)
    scalar = source.replace("const long long* __restrict__ ids", "int n")
    with pytest.raises(LaunchPlanError, match="parameter 'int n' is not a pointer"):
        check_plan_matches_source(plan, scalar)


def test_device_ready_realigns_views_and_converts_types():
    base = torch.arange(17, dtype=torch.float32)
    view = base[1:]                                  # 4 bytes past an aligned allocation
    assert view.data_ptr() % DEVICE_ALIGN != 0
    ready = device_ready(view, "float32")
    assert ready.data_ptr() % DEVICE_ALIGN == 0 and torch.equal(ready, view)
    aligned = base[4:]                               # 16 bytes in: used in place, no copy
    assert device_ready(aligned, "float32").data_ptr() == aligned.data_ptr()
    mask = torch.tensor([[True, False], [False, True]]).t()      # bool, not contiguous
    m = device_ready(mask, "float32")
    assert m.dtype == torch.float32 and m.is_contiguous() and m.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    ids = device_ready(torch.tensor([3, 1], dtype=torch.int32), "int64")
    assert ids.dtype == torch.int64 and ids.tolist() == [3, 1]


def test_fp32_matmuls_with_the_legacy_tf32_flag():
    matmul = torch.backends.cuda.matmul
    try:
        matmul.allow_tf32 = True
        with fp32_matmuls():
            assert matmul.allow_tf32 is False
        assert matmul.allow_tf32 is True
    finally:
        matmul.allow_tf32 = False


def test_fp32_matmuls_with_the_new_tf32_api():
    """After a caller set `fp32_precision = "tf32"`, reading `allow_tf32` raises in torch >= 2.9
    (inductor reads it); inside the switch it reads False, and the caller's setting returns."""
    matmul = torch.backends.cuda.matmul
    if not hasattr(matmul, "fp32_precision"):
        pytest.skip("this torch has only the legacy TF32 flag")
    try:
        matmul.fp32_precision = "tf32"
        with fp32_matmuls():
            assert matmul.allow_tf32 is False and matmul.fp32_precision == "ieee"
        assert matmul.fp32_precision == "tf32"
    finally:
        matmul.allow_tf32 = False           # the legacy setter is always allowed: back to FP32


def test_torch_reference_runs_on_another_device():
    """The eager program bench times on the GPU: a function that creates host tensors (a
    causal mask from torch.ones) or closes over them runs from its export graph moved to the
    device. Checked on the meta device, which refuses host tensors as CUDA does."""
    from deplokit.runtime.bench import cuda_eager
    fn, inputs = PROGRAMS["attention_by_hand"]
    on_meta = tuple(t.to("meta") for t in inputs)
    with pytest.raises(RuntimeError):
        fn(*on_meta)
    out = cuda_eager(fn, on_meta, "meta")(*on_meta)
    assert out.device.type == "meta" and out.shape == fn(*inputs).shape
    bias = torch.randn(16)
    out = cuda_eager(lambda x: x + bias, (torch.randn(3, 16, device="meta"),), "meta")(torch.randn(3, 16, device="meta"))
    assert out.device.type == "meta" and out.shape == (3, 16)


def test_preflight_without_a_device_says_so(capsys, monkeypatch):
    from deplokit.cli import main
    from deplokit.runtime import device
    monkeypatch.setattr(device, "gpu_available", lambda: False)
    assert main(["preflight"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("python ") and f"torch {torch.__version__}" in out
    assert out.rstrip().endswith("FAIL: no CUDA device (cupy.cuda.runtime.getDeviceCount() found none or failed)")
