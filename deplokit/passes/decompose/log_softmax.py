"""log_softmax: (x - max) - log(sum(exp(x - max)))."""
from __future__ import annotations

from .builder import Builder
from .registry import rule
from .softmax import softmax_parts


@rule("log_softmax")
def decompose_log_softmax(op, b: Builder) -> str:
    shifted, _, s = softmax_parts(b, op.args[0], op.attr("dim"))
    log_s = b.elementwise("log", s, hint="log_sum")
    return b.elementwise("subtract", shifted, log_s)
