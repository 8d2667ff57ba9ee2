"""Golden before/after tests of a sample of decompose rules (passes/decompose/<op>.py): the Torch
IR of one op, pinned; the decompose pass alone; the Tensor IR the rule must write; and the
Tensor-IR interpreter against PyTorch. rms_norm's rule is pinned in test_pass_programs.py
(the decompose pass's own golden test) and reused here."""
import pytest
from pass_golden import before, compiled, run_alone
from test_pass_programs import BEFORE_DECOMPOSE, EXPECTED_DECOMPOSE

BEFORE_SOFTMAX = """\
softmax = softmax(x, dim=-1) -> (4, 256) float32"""

# The numerically safe softmax: the row max broadcast back and subtracted, exp, the row sum of
# those, broadcast back, a divide. Three passes over the row once lifted (fuse keeps them one kernel).
EXPECTED_SOFTMAX = """\
max_1 = max(x, axis=-1) -> (4, 1) float32
max_1_bc = max_1[i, na] -> (4, 256) float32
shifted = subtract(x, max_1_bc) -> (4, 256) float32
exp_1 = exp(shifted) -> (4, 256) float32
sum = sum(exp_1, axis=-1) -> (4, 1) float32
sum_bc = sum[i, na] -> (4, 256) float32
softmax = divide(exp_1, sum_bc) -> (4, 256) float32"""

BEFORE_LINEAR = """\
linear = linear(x0, x1) -> (16, 32) float32"""

# x0 @ x1.T as the article writes a matmul: both operands broadcast to (M, K, N) by index maps
# (x1[k, j] reads the weight transposed, no copy), a multiply, a sum over K, the K axis dropped.
EXPECTED_LINEAR = """\
x0_bc = x0[i, j] -> (16, 64, 32) float32
x1_bc = x1[k, j] -> (16, 64, 32) float32
prod = multiply(x0_bc, x1_bc) -> (16, 64, 32) float32
red = sum(prod, axis=-2) -> (16, 1, 32) float32
linear = red[i, na, j] -> (16, 32) float32"""

BEFORE_LAYER_NORM = """\
layer_norm = layer_norm(input, p_weight, p_bias, normalized_shape=(64,), eps=1e-05) -> (4, 64) float32"""

# The row mean, summed from values shifted by the row's first element (a large common offset
# does not cancel in float32) and shifted back; the centred values, their mean square (the
# biased variance, as torch), plus eps
# 1e-05, rsqrt, times the centred values, then the weight and the bias broadcast over the rows.
EXPECTED_LAYER_NORM = """\
input_first = input[i, 0] -> (4, 1) float32
input_first_bc = input_first[i, na] -> (4, 64) float32
shifted = subtract(input, input_first_bc) -> (4, 64) float32
sum = sum(shifted, axis=-1) -> (4, 1) float32
mean_off = divide(sum, 64) -> (4, 1) float32
mean = add(input_first, mean_off) -> (4, 1) float32
mean_bc = mean[i, na] -> (4, 64) float32
xc = subtract(input, mean_bc) -> (4, 64) float32
sq = multiply(xc, xc) -> (4, 64) float32
ss = sum(sq, axis=-1) -> (4, 1) float32
var = divide(ss, 64) -> (4, 1) float32
var_eps = add(var, 1e-05) -> (4, 1) float32
rstd = rsqrt(var_eps) -> (4, 1) float32
rstd_bc = rstd[i, na] -> (4, 64) float32
normed = multiply(xc, rstd_bc) -> (4, 64) float32
p_weight_bc = p_weight[j] -> (4, 64) float32
scaled = multiply(normed, p_weight_bc) -> (4, 64) float32
p_bias_bc = p_bias[j] -> (4, 64) float32
layer_norm = add(scaled, p_bias_bc) -> (4, 64) float32"""

RULES = {
    "rms_norm": ("rms_norm", BEFORE_DECOMPOSE, EXPECTED_DECOMPOSE),
    "softmax": ("softmax", BEFORE_SOFTMAX, EXPECTED_SOFTMAX),
    "linear": ("linear", BEFORE_LINEAR, EXPECTED_LINEAR),
    "layer_norm": ("layer_norm", BEFORE_LAYER_NORM, EXPECTED_LAYER_NORM),
}
GOLDEN = {f"decompose:{op}" for op in RULES}


@pytest.mark.parametrize("op", sorted(RULES))
def test_the_rule_writes_its_tensor_ir(op):
    program, given, expected = RULES[op]
    ir = before(program, "decompose")
    assert str(ir) == given
    step = run_alone("decompose", ir, {})
    assert str(step.after) == expected
    # the op itself is gone: only Tensor-IR primitives remain
    assert f"= {op}(" not in str(step.after)


@pytest.mark.parametrize("op", sorted(RULES))
def test_the_tensor_interpreter_matches_torch(op):
    assert compiled(RULES[op][0]).check(backend="tensor").ok
