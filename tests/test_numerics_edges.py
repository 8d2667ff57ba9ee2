"""Numerics edges (issue 29): a constant row's mean is its element in every backend, so
LayerNorm of it returns exactly the bias and var / std exactly 0, as eager does."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import deplokit

BACKENDS = ("tensor", "loop", "sim")


@pytest.mark.parametrize("shape,normalized", [((4, 129), (129,)), ((3, 7, 37), (7, 37)), ((1, 12289), (12289,))])
def test_layer_norm_of_a_constant_row_is_exactly_the_bias(shape, normalized):
    g = torch.Generator().manual_seed(0)
    x = torch.full(shape, 1000.3)
    x[0] = -3.7e4                       # another constant row, and rows of other values
    if shape[0] > 2:
        x[-1] = torch.randn(shape[1:], generator=g) * 100 + 1000
    w, b = torch.randn(normalized, generator=g), torch.randn(normalized, generator=g)
    fn = lambda x, w, b: F.layer_norm(x, normalized, w, b)
    ref = fn(x, w, b)
    assert torch.equal(ref[:-1 if shape[0] > 2 else None], b.expand_as(ref)[:-1 if shape[0] > 2 else None])
    c = deplokit.compile(fn, x, w, b)
    for backend in BACKENDS:
        out = torch.as_tensor(np.asarray(c.run(x, w, b, backend=backend)))
        assert torch.equal(out[:2], ref[:2]), backend           # constant rows: bit-exact
        assert torch.allclose(out, ref, rtol=1e-4, atol=1e-4), backend


@pytest.mark.parametrize("op", ["var", "std"])
def test_var_and_std_of_a_constant_row_are_exactly_zero(op):
    x = torch.full((5, 33), 1000.3)
    x[1] = 0.1
    fn = (lambda x: x.var(-1)) if op == "var" else (lambda x: x.std(-1))
    assert torch.equal(fn(x), torch.zeros(5))
    c = deplokit.compile(fn, x)
    for backend in BACKENDS:
        assert torch.equal(torch.as_tensor(np.asarray(c.run(x, backend=backend))), torch.zeros(5)), backend
