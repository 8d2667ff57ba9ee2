"""A comparison, rounding, arg-max or cast to an integer of a half value decides on the value
eager rounded: decompose rounds the half ops behind it as eager does (in registers, nothing
stored; decompose.half_decision_operands), so the decision is eager's. check() then compares
with eager alone: a float32 run decides on unrounded values and may differ by a whole step.
And the fuzzer's half mode: a program eager rejects is refused, a case where eager is farther
from the float32 run than deplokit is not a finding, and the reproducer replays the dtype."""
import shlex

import torch

import deplokit
from deplokit.fuzz import __main__ as fuzz_cli
from deplokit.fuzz.programs import Case
from deplokit.fuzz.runner import reproducer, run_case
from deplokit.passes.decompose.program import half_decision_operands

# 171/512 is a bf16 value; x * 3 = 513/512 rounds to 1.0 in bf16 (a quarter of an ulp above)
THIRD = 171 / 512


def _inputs():
    x = torch.tensor([THIRD, 0.5, -0.25, 2.0], dtype=torch.bfloat16)
    assert float(x[0]) == THIRD and float(x[0] * 3) == 1.0 and THIRD * 3 > 1
    return (x,)


def test_a_comparison_of_a_half_product_is_eagers():
    def f(x):
        return torch.where(x * 3 > 1, 1.0, 0.0)

    (x,) = _inputs()
    c = deplokit.compile(f, x)
    assert "mul_bf16 = convert(mul) -> (4,) bfloat16" in str(c.tensor_ir)
    assert not c.tensor_ir.stored_half                  # rounded in registers, not stored
    for backend in ("tensor", "loop", "sim"):
        got = c.run(x, backend=backend)
        assert torch.equal(got, f(x)), backend
        assert float(got[0]) == 0.0                     # the unrounded 1.0019 > 1 would say 1
    r = c.check(backend="sim")
    assert r.passed and r.float32 is None               # a float32 run says 1 there


def test_every_half_op_behind_a_decision_is_rounded():
    """x * 3 - 1 > 0: eager rounds the product to 1.0, so the difference is 0; rounding only the
    difference would keep 3 * x - 1 = 2**-9 > 0."""
    def f(x):
        return (x * 3 - 1 > 0).float()

    (x,) = _inputs()
    c = deplokit.compile(f, x)
    ops = {op.name: op.op for op in c.torch_ir.ops}
    assert {ops[n] for n in half_decision_operands(c.torch_ir) if n in ops} == {"mul", "sub"}
    assert torch.equal(c.run(x, backend="loop"), f(x))


def test_a_cast_to_an_integer_truncates_eagers_value():
    """2 + 255/256 rounds to 3.0 in bf16 (a quarter of an ulp below): eager truncates 3."""
    def f(x, y):
        return (x + y).to(torch.int32)

    x, y = torch.tensor([2.0, -1.5], dtype=torch.bfloat16), torch.tensor([255 / 256, 0.25], dtype=torch.bfloat16)
    c = deplokit.compile(f, x, y)
    got = c.run(x, y, backend="loop")
    assert torch.equal(got, f(x, y)) and int(got[0]) == 3


def test_fuzz_refuses_what_eager_rejects_in_half_and_replays_the_dtype(capsys):
    rejected = Case(0, 0, "x0 = torch.randn(4, 8, dtype=torch.bfloat16)\nv0 = nn.Linear(8, 3)(x0)\nv0",
                    ("nn_linear",), "sm_80", dtype="bfloat16")
    out = run_case(rejected, timeout=60)
    assert out.status == "refused" and out.stage == "eager" and "eager rejects it" in out.message
    case = Case(0, 0, "x0 = torch.randn(33, 1, dtype=torch.bfloat16)\nv0 = F.layer_norm(x0, (1,))\nv0",
                ("layer_norm",), "sm_80", {"005_blockify_launch.block_threads": 64}, "bfloat16")
    # eager's bf16 layer_norm of one element is 2.5e-5 from the exact 0, which deplokit gives
    assert run_case(case, timeout=60).status == "ok"
    line = reproducer(case, "tensor")
    assert " --dtype bfloat16 " in line
    assert fuzz_cli.main(shlex.split(line)[3:]) == 0
    assert capsys.readouterr().out.startswith("ok")


def test_a_decision_behind_a_float32_cast_rounds_the_half_value_before_it():
    """remainder(mm(a, b).float() * 4, 2.5) in fp16: eager's product is rounded to fp16 before
    the cast; the decision's operand is float32, the half op behind it is rounded all the same."""
    def f(a, b):
        return torch.remainder(torch.mm(a, b).float() * 4, 2.5)

    a, b = torch.randn(3, 8, dtype=torch.float16), torch.randn(8, 5, dtype=torch.float16)
    c = deplokit.compile(f, a, b)
    ops = {op.name: op.op for op in c.torch_ir.ops}
    assert "mm" in {ops[n] for n in half_decision_operands(c.torch_ir) if n in ops}
    assert c.check(backend="loop").passed


def test_fuzz_an_ill_conditioned_half_program_is_not_a_finding():
    """cos of a bf16 matmul's values near 360: the bf16 rounding of the first linear's output
    (eager's too) moves the cosines by a whole step from the float32 run; eager is as far from
    that run as deplokit, so the program is ill-conditioned, not deplokit wrong (fuzz seed 505)."""
    text = "\n".join((
        'x0 = torch.randn(3, 129, 31, dtype=torch.bfloat16)',
        'x1 = torch.randn(33, 3999, dtype=torch.bfloat16)',
        'x2 = torch.randn(33, dtype=torch.bfloat16)',
        'v0 = F.linear(x0.reshape(3, 3999), x1, x2)',
        'x3 = torch.randn(33, 33, dtype=torch.bfloat16)',
        'x4 = torch.randn(33, dtype=torch.bfloat16)',
        'v1 = F.linear(v0, x3, x4)',
        'v2 = v1[:, 2:18:2]',
        'x5 = torch.randn(1, dtype=torch.bfloat16)',
        'v3 = torch.maximum(v2, x5)',
        'v4 = torch.cos(v3)',
        'v5 = v4.var(-1, keepdim=False)',
        'v6 = v5.contiguous()',
        'v6',
    ))
    case = Case(505, 0, text, ("linear",), "sm_80", {"003_split_matmul_k.reduce": "reducer"}, "bfloat16")
    assert run_case(case, timeout=120).status == "ok"
