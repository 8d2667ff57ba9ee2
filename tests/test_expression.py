"""`-c EXPR` and model files: inputs, naming, evaluation once, determinism, errors."""
import inspect

import pytest
import torch
from torch import nn

import deplokit
from deplokit.errors import ExpressionError
from deplokit.frontend.expression import load_expression
from deplokit.frontend.pyfile import load_file

RMSNORM = "nn.RMSNorm(2048)(torch.randn(1,32,2048))"
MATMUL = "torch.relu(torch.matmul(torch.randn(16,64) + torch.randn(64), torch.randn(64,16)))"
MATMUL_NAMED = ("x = torch.randn(16,64); bias = torch.randn(64); w = torch.randn(64,16); "
                "torch.relu(torch.matmul(x + bias, w))")


def _param_names(fn):
    target = fn.forward if isinstance(fn, nn.Module) else fn
    return tuple(inspect.signature(target).parameters)


def test_module_form_is_the_module_and_names_its_input_after_forward():
    p = load_expression(RMSNORM)
    assert isinstance(p.fn, nn.RMSNorm)
    assert p.names == ("x",)
    assert len(p.inputs) == 1 and p.inputs[0].shape == (1, 32, 2048)
    assert p.inputs[0].dtype == torch.float32


def test_module_is_evaluated_once_so_eager_and_capture_share_weights():
    p = load_expression("nn.Linear(8, 4)(torch.randn(2, 8))")
    assert isinstance(p.fn, nn.Linear)
    assert p.names == ("input",)            # nn.Linear.forward(self, input)
    c = deplokit.compile(p.fn, *p.inputs)
    # compare against the module's own weights: same object, not a re-constructed one
    expected = p.inputs[0] @ p.fn.weight.detach().T + p.fn.bias.detach()
    torch.testing.assert_close(c.run(*p.inputs, backend="loop"), expected, rtol=1e-5, atol=1e-6)
    assert c.check(*p.inputs, backend="loop").ok


def test_assigned_factories_are_inputs_named_after_their_variables():
    p = load_expression(MATMUL_NAMED)
    assert p.names == ("x", "bias", "w")
    assert _param_names(p.fn) == ("x", "bias", "w")
    assert [tuple(t.shape) for t in p.inputs] == [(16, 64), (64,), (64, 16)]
    c = deplokit.compile(p.fn, *p.inputs)
    assert c.input_names == ("x", "bias", "w")
    assert c.check(backend="loop").ok


def test_anonymous_factories_are_x0_x1_x2():
    p = load_expression(MATMUL)
    assert p.names == ("x0", "x1", "x2")
    assert _param_names(p.fn) == ("x0", "x1", "x2")
    c = deplokit.compile(p.fn, *p.inputs)
    assert c.input_names == ("x0", "x1", "x2")
    out = p.fn(*p.inputs)
    torch.testing.assert_close(out, torch.relu((p.inputs[0] + p.inputs[1]) @ p.inputs[2]))


def test_generated_names_avoid_names_in_the_text():
    p = load_expression("x0 = 3; torch.randn(4, x0) * torch.randn(4, 1)")
    assert "x0" not in p.names
    assert len(set(p.names)) == 2
    assert p.inputs[0].shape == (4, 3)      # x0 = 3 was evaluated and reused


def test_reserved_and_repeated_names_get_suffixes():
    p = load_expression("fn = torch.randn(3); a = torch.randn(3); a = torch.randn(3); fn + a")
    assert p.names == ("fn_1", "a", "a_1")
    assert _param_names(p.fn) == p.names
    # the program uses the last `a`, as Python would
    torch.testing.assert_close(p.fn(*p.inputs), p.inputs[0] + p.inputs[2])


def test_suffixed_names_do_not_clash_with_names_in_the_text():
    p = load_expression("a_1 = 2.0; a = torch.randn(3); a = torch.randn(3); a * a_1")
    assert p.names == ("a", "a_2")
    torch.testing.assert_close(p.fn(*p.inputs), p.inputs[1] * 2)


def test_expression_is_deterministic_and_seeded():
    a, b = load_expression(MATMUL_NAMED), load_expression(MATMUL_NAMED)
    for x, y in zip(a.inputs, b.inputs):
        assert torch.equal(x, y)
    torch.manual_seed(0)
    assert torch.equal(a.inputs[0], torch.randn(16, 64))


def test_global_rng_is_left_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    load_expression(RMSNORM)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_in_place_update_does_not_change_the_example_input():
    p = load_expression("x = torch.zeros(3); x.add_(1); x * 2")
    assert torch.equal(p.inputs[0], torch.zeros(3))
    assert torch.equal(p.fn(p.inputs[0].clone()), torch.full((3,), 2.0))


def test_multiline_statements_and_constants_computed_once():
    text = "m = nn.Linear(8, 4)\nx = torch.randn(2, 8)\ny = m(x)\ny[:, 1:] * 2"
    p = load_expression(text)
    assert p.names == ("x",)
    assert "nn.Linear" not in p.code        # module construction is hoisted, not re-run
    c = deplokit.compile(p.fn, *p.inputs)
    assert c.check(backend="tensor").ok


class _RealMatmuls(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts matmuls computed on real (not meta) tensors."""
    def __init__(self):
        super().__init__()
        self.real = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.startswith("mm") and not any(
                isinstance(a, torch.Tensor) and a.is_meta for a in args):
            self.real += 1
        return func(*args, **(kwargs or {}))


def test_what_depends_on_an_input_is_shape_checked_not_computed():
    # a 4096² bf16 matmul took minutes of CPU time to evaluate eagerly before capture
    with _RealMatmuls() as counter:
        p = load_expression("w = torch.randn(64, 32); torch.relu(torch.randn(16, 64) @ w)")
    assert counter.real == 0
    assert p.names == ("w", "x0") and [tuple(t.shape) for t in p.inputs] == [(64, 32), (16, 64)]
    assert not any(t.is_meta for t in p.inputs)


@pytest.mark.parametrize("text", [
    "x = torch.randn(5); x * x.sum().item()",          # item(): no meta kernel, evaluated eagerly
    "x = torch.randn(4, 3); x + torch.rand_like(x)",   # a factory shaped like an input
])
def test_what_needs_values_is_evaluated_eagerly(text):
    p = load_expression(text)
    assert not any(t.is_meta for t in p.inputs)
    assert torch.isfinite(p.fn(*p.inputs)).all()


@pytest.mark.parametrize("text, needle", [
    ("torch.relu(torch.randn(4,4)", "line 1, column"),
    ("torch.randn(4,4) +* 2", "malformed expression"),
    ("foo(torch.randn(3))", "torch, nn"),
    ("x = torch.randn(3)\ny = x * undefined_name\ny", "line 2, column 9"),
    ("nn.RMSNorm(8)", "not a tensor"),
    ("1 + 2", "not a tensor"),
    ("x = torch.randn(3)", "last statement"),
    ("for i in range(3): pass", "'for' loop"),
    ("", "empty"),
    ("torch.stack([torch.randn(2) for _ in range(3)])", "comprehension"),
    ("torch.randn(2, 3) @ torch.randn(4, 5)", "RuntimeError"),
    ("torch.ones(3) if False else torch.zeros(3)", "never evaluated"),
])
def test_bad_expressions_raise_expression_error_with_one_line(text, needle):
    with pytest.raises(ExpressionError) as info:
        load_expression(text)
    msg = str(info.value)
    assert needle in msg
    assert "\n" not in msg


def test_name_error_mentions_scope_and_position():
    with pytest.raises(ExpressionError, match=r"NameError: name 'foo' is not defined") as info:
        load_expression("torch.relu(foo)")
    assert "line 1, column 12" in str(info.value)


def test_expression_error_is_a_deplokit_error():
    assert issubclass(ExpressionError, deplokit.DeplokitError)


# -- model files ------------------------------------------------------------------------------

def test_model_file_with_module_and_input_tuple(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import torch\nfrom torch import nn\nmodel = nn.RMSNorm(64)\ninputs = (torch.randn(2, 64),)\n")
    p = load_file(str(f))
    assert isinstance(p.fn, nn.RMSNorm) and p.names == ("x",)
    assert p.inputs[0].shape == (2, 64)
    assert deplokit.compile(p.fn, *p.inputs).check(backend="loop").ok


def test_model_file_with_function_and_inputs_function(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import torch\n"
                 "def model(a, b):\n    return torch.relu(a @ b)\n"
                 "def inputs():\n    return torch.randn(3, 5), torch.randn(5, 2)\n")
    p = load_file(str(f))
    assert p.names == ("a", "b")
    c = deplokit.compile(p.fn, *p.inputs)
    assert c.input_names == ("a", "b") and c.check().ok


@pytest.mark.parametrize("body, needle", [
    ("import torch\ninputs = (torch.randn(2),)\n", "does not define `model`"),
    ("import torch\nmodel = torch.relu\n", "does not define `inputs`"),
    ("import torch\nmodel = torch.relu\ninputs = (3,)\n", "must be a tuple of tensors"),
    ("import torch\nmodel = 5\ninputs = (torch.randn(2),)\n", "must be an nn.Module or a function"),
    ("x = (\n", "SyntaxError"),
    ("import torch\n\nraise ValueError('boom')\n", "line 3: ValueError: boom"),
])
def test_bad_model_files(tmp_path, body, needle):
    f = tmp_path / "bad.py"
    f.write_text(body)
    with pytest.raises(ExpressionError) as info:
        load_file(str(f))
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_model_file(tmp_path):
    with pytest.raises(ExpressionError, match="no such file"):
        load_file(str(tmp_path / "nope.py"))
