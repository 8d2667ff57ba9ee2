"""One op table (deplokit/ir/ops.py): every table of the compiler that names elementwise
primitives reads it, so a primitive is added in one place; C's integer division is written
once (ir/index.py c_div, c_rem) and the simulator and the tuner's address evaluation use it."""
import math

import numpy as np

from deplokit.analysis.work import SLOW_OPS
from deplokit.frontend.aten_table import ATEN_OPS
from deplokit.ir import kernel_ir as K
from deplokit.ir.index import c_div, c_rem
from deplokit.ir.ops import OPS, is_c_operator
from deplokit.ir.tensor_ir import ELEMENTWISE_OPS, FLOAT_RESULT_OPS
from deplokit.passes.decompose.program import decompose  # noqa: F401  (registers every rule)
from deplokit.passes.decompose.registry import RULES
from deplokit.passes.lower.cuda import _FLOAT_FUNCS, _INFIX_CALLS  # noqa: F401
from deplokit.runtime import numpy_ops
from deplokit.runtime.sim.values import binary_values
from deplokit.tune.sass_model.loop_addresses import evaluate
from deplokit.tune.sass_model.main_loop import SLOW_CALLS


def test_every_table_reads_the_op_table():
    assert set(ELEMENTWISE_OPS) == set(OPS)
    assert set(FLOAT_RESULT_OPS) == {n for n, op in OPS.items() if op.result == "float"}
    assert all(numpy_ops.OPS[n] is op.numpy for n, op in OPS.items() if op.numpy is not None)
    # the one meaning ir/ cannot hold: TF32 rounding is runtime/rounding.py's
    assert {n for n, op in OPS.items() if op.numpy is None} == {"round_tf32"} <= set(numpy_ops.OPS)
    assert SLOW_OPS == set(SLOW_CALLS) == {n for n, op in OPS.items() if op.slots}
    for name, op in OPS.items():
        for aten in op.aten:
            assert ATEN_OPS[f"{aten}.default"][0] == aten and aten in RULES
        if op.cuda and not is_c_operator(op.cuda):
            assert _FLOAT_FUNCS[name] == op.cuda
        elif op.cuda:
            assert _INFIX_CALLS[name] == op.cuda


def test_c_integer_division_is_written_once():
    for a in range(-9, 10):
        for b in (-4, -3, -1, 1, 2, 5):
            assert c_div(a, b) == math.trunc(a / b) and c_rem(a, b) == math.fmod(a, b)
            expr = K.Binary("/", K.Const(a, "int"), K.Const(b, "int"))
            assert evaluate(expr, {}) == c_div(a, b)
            assert evaluate(K.Binary("%", K.Const(a, "int"), K.Const(b, "int")), {}) == c_rem(a, b)
    a = np.arange(-9, 10, dtype=np.int64)
    assert (binary_values("/", a, np.int64(-4)) == np.trunc(a / -4)).all()
    assert (binary_values("%", a, np.int64(-4)) == np.fmod(a, -4)).all()
