"""elu, selu and celu: x where it is positive, a scaled exp(x) - 1 below (torch's expm1)."""
from __future__ import annotations

from .builder import Builder
from .registry import rule

# torch.nn.functional.selu's constants
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def elu(b: Builder, x: str, alpha: float, scale: float = 1.0, input_scale: float = 1.0) -> str:
    """scale * x where x > 0, else scale * alpha * (exp(input_scale * x) - 1)."""
    scaled_x = x if input_scale == 1 else b.elementwise("multiply", x, float(input_scale), hint="elu_in")
    negative = b.elementwise("multiply", b.elementwise("expm1", scaled_x, hint="elu_exp"), float(alpha * scale),
                             hint="elu_neg")
    positive = x if scale == 1 else b.elementwise("multiply", x, float(scale), hint="elu_pos")
    return b.elementwise("where", b.elementwise("greater", x, 0.0, hint="elu_up"), positive, negative, hint="elu")


@rule("elu")
def decompose_elu(op, b: Builder) -> str:
    return elu(b, op.args[0], op.attr("alpha", 1), op.attr("scale", 1), op.attr("input_scale", 1))


@rule("selu")
def decompose_selu(op, b: Builder) -> str:
    return elu(b, op.args[0], SELU_ALPHA, SELU_SCALE)


@rule("celu")
def decompose_celu(op, b: Builder) -> str:
    alpha = float(op.attr("alpha", 1.0))
    return elu(b, op.args[0], alpha, 1.0, 1.0 / alpha)
