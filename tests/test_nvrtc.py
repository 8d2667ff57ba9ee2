"""Compile-only NVRTC checks of the emitted translation unit (no GPU needed, only libnvrtc)."""
import pytest
import torch
from torch import nn

import deplokit
from deplokit.runtime.nvrtc import NvrtcError, compile_nvrtc, nvrtc_available

pytestmark = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (cupy + libnvrtc) is not available")

PROGRAMS = {
    "rmsnorm": (nn.RMSNorm(256), (torch.randn(1, 8, 256),)),
    "matmul": (lambda a, b: a @ b, (torch.randn(1, 64, 512), torch.randn(512, 96))),
    "masked_softmax": (lambda x: torch.softmax(x.masked_fill(x > 1, float("-inf")), -1), (torch.randn(4, 300),)),
    "causal_gqa_sdpa": (lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True), (torch.randn(1, 4, 16, 32), torch.randn(1, 2, 16, 32),
                                                   torch.randn(1, 2, 16, 32))),
}
# the guards decline row fusion; causal_gqa_sdpa itself is one flash-attention kernel
CONFIGS = {
    "causal_gqa_sdpa_row_fused": ("causal_gqa_sdpa", {"fuse_rows.by_cost": False, "fuse_attention.enable": False})
}


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
@pytest.mark.parametrize("name", sorted(PROGRAMS) + sorted(CONFIGS))
def test_emitted_translation_unit_compiles_with_nvrtc(name, target):
    program, config = CONFIGS.get(name, (name, {}))
    fn, inputs = PROGRAMS[program]
    c = deplokit.compile(fn, *inputs, target=target, config=config)
    result = compile_nvrtc(str(c.cuda), target)
    assert result.cubin[:4] == b"\x7fELF"
    assert f"--gpu-architecture={target}" in result.options
    for kernel in c.cuda.kernels:
        assert kernel.encode() in result.cubin            # extern "C": unmangled symbol names


def test_infinity_literals_compile_under_nvrtc():
    fn, inputs = PROGRAMS["masked_softmax"]
    c = deplokit.compile(fn, *inputs)
    assert "INFINITY" in str(c.cuda)
    assert compile_nvrtc(str(c.cuda), "sm_90").cubin


def test_error_names_the_line_of_the_rendered_source():
    src = 'extern "C" __global__ void f(float* x) {\n    x[0] = undefined_name;\n}\n'
    with pytest.raises(NvrtcError) as e:
        compile_nvrtc(src, "sm_90")
    assert "kernel.cu line 2" in str(e.value) and "undefined_name" in str(e.value)
    assert e.value.line == 2
    with pytest.raises(deplokit.DeplokitError, match="unknown architecture"):
        compile_nvrtc(src, "compute_90")


def test_results_are_cached_per_source_and_arch():
    src = 'extern "C" __global__ void g(float* x) { x[threadIdx.x] = 1.0f; }\n'
    assert compile_nvrtc(src, "sm_90") is compile_nvrtc(src, "sm_90")
    assert compile_nvrtc(src, "sm_80") is not compile_nvrtc(src, "sm_90")
