"""Golden text of every IR for the seeds' two examples (FileCheck style: the whole print)."""
import torch
import torch.nn as nn

import deplokit


def relu_matmul():
    def f(x, bias, w):
        return torch.relu(torch.matmul(x + bias, w))
    return deplokit.compile(f, torch.randn(16, 64), torch.randn(64), torch.randn(64, 16))


def rms_norm():
    return deplokit.compile(nn.RMSNorm(2048, eps=1e-6), torch.randn(1, 32, 2048))


def test_relu_matmul_torch_ir():
    assert str(relu_matmul().torch_ir) == """\
add = add(x, bias) -> (16, 64) float32
matmul = matmul(add, w) -> (16, 16) float32
relu = relu(matmul) -> (16, 16) float32"""


def test_relu_matmul_tensor_ir_is_the_articles():
    # A multiply of broadcast operands, a sum over K, an index map dropping the K axis.
    assert str(relu_matmul().tensor_ir) == """\
bias_bc = bias[j] -> (16, 64) float32
add = add(x, bias_bc) -> (16, 64) float32
add_bc = add[i, j] -> (16, 64, 16) float32
w_bc = w[j, k] -> (16, 64, 16) float32
prod = multiply(add_bc, w_bc) -> (16, 64, 16) float32
red = sum(prod, axis=-2) -> (16, 1, 16) float32
matmul = red[i, na, j] -> (16, 16) float32
relu = relu(matmul) -> (16, 16) float32"""


def test_relu_matmul_loop_ir_is_one_merged_kernel():
    assert str(relu_matmul().loop_ir) == """\
=== merged_relu -> relu ===
for a0 in 0..16:  # free (M)
    for a1 in 0..16:  # free (N)
        for a2 in 0..64:  # reduce (K)
            in0 = load x[a0, a2]
            in1 = load bias[a2]
            in2 = load w[a2, a1]
            v0 = add(in0, in1)  # prologue (inside reduce)
            v1 = multiply(v0, in2)
            acc0 <- add(acc0, v1)
        v2 = relu(acc0)  # epilogue (outside reduce)
        relu[a0, a1] = v2"""


def test_rms_norm_torch_ir():
    assert str(rms_norm().torch_ir) == (
        "rms_norm = rms_norm(x, p_weight, normalized_shape=(2048,), eps=1e-06) -> (1, 32, 2048) float32")


def test_rms_norm_tensor_ir():
    assert str(rms_norm().tensor_ir) == """\
sq = multiply(x, x) -> (1, 32, 2048) float32
ss = sum(sq, axis=-1) -> (1, 32, 1) float32
ms = divide(ss, 2048) -> (1, 32, 1) float32
ms_eps = add(ms, 1e-06) -> (1, 32, 1) float32
rstd = rsqrt(ms_eps) -> (1, 32, 1) float32
rstd_bc = rstd[i, j, na] -> (1, 32, 2048) float32
normed = multiply(x, rstd_bc) -> (1, 32, 2048) float32
p_weight_bc = p_weight[k] -> (1, 32, 2048) float32
rms_norm = multiply(normed, p_weight_bc) -> (1, 32, 2048) float32"""


def test_rms_norm_loop_ir_reduce_then_free():
    assert str(rms_norm().loop_ir) == """\
=== merged_rms_norm -> rms_norm ===
for a0 in 0..32:  # free
    for a1 in 0..2048:  # reduce
        in0 = load x[0, a0, a1]
        v0 = multiply(in0, in0)
        acc0 <- add(acc0, v0)
    v1 = divide(acc0, 2048)
    v2 = add(v1, 1e-06)
    v3 = rsqrt(v2)
    for a2 in 0..2048:  # free
        in1 = load x[0, a0, a2]
        in2 = load p_weight[a2]
        v4 = multiply(in1, v3)
        v5 = multiply(v4, in2)
        rms_norm[0, a0, a2] = v5"""


def test_headers_list_buffers_and_outputs():
    c = rms_norm()
    assert c.loop_ir.header().splitlines() == [
        "# p_weight: (2048,) float32 param",
        "# x: (1, 32, 2048) float32 input",
        "# rms_norm: (1, 32, 2048) float32 output",
        "# outputs: rms_norm",
    ]


def test_scalar_operands_print_in_torch_ir():
    c = deplokit.compile(lambda x: (x / 2.5 - 1) * 3, torch.randn(4, 8))
    assert str(c.torch_ir).splitlines() == [
        "div_1 = div(x, 2.5) -> (4, 8) float32",     # `div` is C's div(): no kernel may take it
        "sub = sub(div_1, 1) -> (4, 8) float32",
        "mul = mul(sub, 3) -> (4, 8) float32",
    ]
