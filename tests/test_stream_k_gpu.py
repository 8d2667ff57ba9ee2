"""Stream-K on a real GPU (issue 26; the device session's correctness step runs every
tests/test_*gpu*.py): the dealt kernels against torch eager on the device, and bit-identical
from launch to launch, whichever worker of a tile arrives last (its fences and its integer
counter are what the simulator cannot time). Skips cleanly without a CUDA device."""
import pytest
import torch
import torch.nn.functional as F

import deplokit
from deplokit.runtime.device import gpu_available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="needs a CUDA device")]

REDUCE = "003_split_matmul_k.reduce"


def _target():
    from deplokit.runtime.cupy_backend import device_arch
    cc = device_arch()[1]
    return "sm_120" if cc >= 120 else "sm_90" if cc >= 90 else "sm_80"


def _bias_gelu(x, w, b, r):
    return F.gelu(F.linear(x, w, b) + r)


# (name, fn, shapes, dtype, config): a grid 003 deals by default on sm_90 (FP32, 112 tiles of
# 40 K chunks on 264 workers), the same forced elsewhere, wgmma / mma.sync tiles, and an
# epilogue whose bias and residual are read at each segment's tile
CASES = [
    ("fp32_projection", F.linear, ((1, 119, 640), (7168, 640)), torch.float32, {REDUCE: "stream_k"}),
    ("bf16_projection", F.linear, ((1, 128, 1024), (4096, 1024)), torch.bfloat16, {REDUCE: "stream_k"}),
    ("fp32_bias_residual_gelu", _bias_gelu, ((1, 96, 896), (4864, 896), (4864,), (1, 96, 4864)), torch.float32,
     {REDUCE: "stream_k"}),
]


@pytest.mark.parametrize("name,fn,shapes,dtype,config", CASES, ids=[c[0] for c in CASES])
def test_stream_k_matches_eager_on_the_device_and_repeats_bit_for_bit(name, fn, shapes, dtype, config):
    g = torch.Generator().manual_seed(0)
    inputs = tuple((torch.randn(*s, generator=g) / s[-1] ** 0.25).to(dtype) for s in shapes)
    c = deplokit.compile(fn, *inputs, target=_target(), config=config)
    assert any(k.split_k is not None and k.split_k.stream_k for k in c.tile_ir.kernels)
    cuda_inputs = tuple(t.cuda() for t in inputs)
    assert c.check(*cuda_inputs, backend="cupy").ok          # against eager on the device
    first = c.run(*cuda_inputs, backend="cupy")
    for _ in range(3):                                       # the counters are zero again after each
        assert torch.equal(c.run(*cuda_inputs, backend="cupy"), first)
