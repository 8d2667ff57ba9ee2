"""Ops real models reached and deplokit refused (issue 29 item 5): in-place add_ (Falcon),
Tensor.unfold and ones_like / zeros_like / full_like (PatchTSMixer), empty_like that a copy_
overwrites, one_hot of an argmax (routing), conv1d (depthwise causal as in Mamba, and with
groups 1, bias, stride, dilation). Each on the tensor, loop and simulator backends at a base
and an odd shape against eager, and through nvcc."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import deplokit
from deplokit.errors import DeplokitError, UnsupportedOpError
from deplokit.frontend.aten_table import covered_ops
from deplokit.runtime.nvcc import nvcc_available

BACKENDS = ("tensor", "loop", "sim")


def falcon_add_(x, y):
    h = torch.tanh(x)
    h.add_(y)               # in place on a whole tensor: later reads see the sum
    return h * h


def patch_unfold(x):
    # PatchTSMixer: (batch, channels, length) -> (batch, channels, patches, patch length)
    return x.unfold(-1, 4, 3) * 2 + torch.ones_like(x).unfold(-1, 4, 3)


def middle_unfold(x):
    return x.unfold(1, 2, 1).sum(-1)


def shape_only(x):
    return torch.ones_like(x) * x + torch.zeros_like(x) + torch.full_like(x, 0.5)


def overwritten_empty(x):
    e = torch.empty_like(x)
    e.copy_(x.sum(-1, keepdim=True))       # broadcast into all of it
    return e * x


def argmax_one_hot(x):
    n = x.shape[-1]
    route = F.one_hot(x.argmax(-1), n)
    return route, route.float() * torch.softmax(x, -1)


class CausalDepthwise(nn.Module):
    """Mamba's short convolution: one filter a channel, k - 1 zeros in front, cut to L."""

    def __init__(self, channels, k):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, k, groups=channels, padding=k - 1)

    def forward(self, x):
        return self.conv(x)[..., :x.shape[-1]]


def _module(m):
    torch.manual_seed(0)
    return m().eval()


CASES = {
    "add_": (falcon_add_, [((4, 32), (4, 32)), ((3, 37), (37,))]),
    "unfold": (patch_unfold, [((2, 3, 16),), ((3, 5, 37),)]),
    "unfold middle axis": (middle_unfold, [((2, 6, 8),), ((3, 7, 5),)]),
    "ones/zeros/full_like": (shape_only, [((4, 32),), ((3, 37),)]),
    "empty_like overwritten": (overwritten_empty, [((4, 32),), ((3, 37),)]),
    "one_hot of argmax": (argmax_one_hot, [((6, 8),), ((5, 3, 13),)]),
    "conv1d depthwise causal": (lambda: CausalDepthwise(8, 4), [((2, 8, 16),)]),
    "conv1d depthwise causal odd": (lambda: CausalDepthwise(5, 3), [((3, 5, 37),)]),
    "conv1d bias stride dilation": (lambda: nn.Conv1d(8, 6, 3, stride=2, dilation=2, padding=1),
                                    [((2, 8, 16),)]),
    "conv1d odd": (lambda: nn.Conv1d(5, 7, 4, stride=3, dilation=2, padding=2), [((3, 5, 37),), ((5, 37),)]),
    "conv1d groups 2 same": (lambda: nn.Conv1d(6, 4, 3, groups=2, padding="same", bias=False), [((2, 6, 11),)]),
}


def _fn(entry):
    fn = entry[0]
    return _module(fn) if fn.__name__ == "<lambda>" else fn


@pytest.mark.parametrize("name", CASES)
def test_matches_eager_on_every_backend(name):
    fn = _fn(CASES[name])
    for shapes in CASES[name][1]:
        g = torch.Generator().manual_seed(len(shapes[0]))
        inputs = tuple(torch.randn(*s, generator=g) for s in shapes)
        c = deplokit.compile(fn, *inputs)
        for backend in BACKENDS:
            result = c.check(backend=backend)
            assert result.ok, (name, shapes, backend, result)


def test_each_op_has_its_own_torch_ir_node_and_no_runtime_constant():
    ops = {n: [op.op for op in deplokit.compile(_fn(CASES[n]), *(torch.randn(*s) for s in CASES[n][1][0])).torch_ir.ops]
           for n in ("unfold", "one_hot of argmax", "conv1d odd", "empty_like overwritten", "add_")}
    assert "unfold" in ops["unfold"] and "one_hot" in ops["one_hot of argmax"] and "conv1d" in ops["conv1d odd"]
    assert ops["empty_like overwritten"] == ["sum", "copy", "mul"]      # empty_like folded, nothing read of it
    assert ops["add_"] == ["tanh", "add", "mul"]
    assert {"unfold", "one_hot", "conv1d", "copy"} <= set(covered_ops())   # `deplokit ops` lists them


def test_one_hot_is_an_exact_integer_compare():
    ids = torch.tensor([[0, 5, 2], [4, 4, 1]])
    c = deplokit.compile(lambda i: F.one_hot(i, 6), ids)
    for backend in BACKENDS:
        got = c.run(ids, backend=backend)
        assert got.dtype == torch.int64 and torch.equal(got, F.one_hot(ids, 6)), backend


def test_depthwise_conv_is_a_row_reduction_and_groups_one_a_matmul():
    x = torch.randn(2, 8, 16)
    dw = deplokit.compile(_module(lambda: CausalDepthwise(8, 4)), x)
    reductions = [n for n in dw.tensor_ir.nodes if type(n).__name__ == "Reduction"]
    assert len(reductions) == 1 and dw.tensor_ir.types()[reductions[0].src].shape == (2, 8, 19, 4)
    full = deplokit.compile(_module(lambda: nn.Conv1d(8, 6, 3)), x)
    red = next(n for n in full.tensor_ir.nodes if type(n).__name__ == "Reduction")
    assert full.tensor_ir.types()[red.src].shape == (2, 14, 24, 6)        # (N, L_out, C_in K, C_out)


def test_empty_like_read_before_it_is_filled_is_refused():
    def partly(x):
        e = torch.empty_like(x)
        e[:, :2] = x[:, :2]           # the rest stays undefined
        return e

    def read_first(x):
        e = torch.empty_like(x)
        y = e + 1
        e.copy_(x)
        return y
    for fn in (partly, read_first):
        with pytest.raises(UnsupportedOpError, match="empty_like.* before a copy_ fills it whole"):
            deplokit.compile(fn, torch.randn(3, 5))


def test_one_hot_without_a_class_count_is_refused():
    # the class count would be max(ids) + 1: a shape that depends on the data
    with pytest.raises(DeplokitError, match="depends on tensor data"):
        deplokit.compile(lambda i: F.one_hot(i), torch.tensor([0, 2]))


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_the_cuda_compiles(target):
    conv = _module(lambda: nn.Conv1d(5, 7, 4, stride=3, dilation=2, padding=2))
    dw = _module(lambda: CausalDepthwise(5, 3))

    def model(x):
        h = torch.sigmoid(dw(x))
        h.add_(conv(x).sum(1, keepdim=True).mean(-1, keepdim=True))
        route = F.one_hot(h.argmax(1), 5).float()
        e = torch.empty_like(h)
        e.copy_(h.unfold(-1, 3, 3).sum(-1).repeat_interleave(3, -1)[..., :1].expand_as(h))
        return route.sum(-1) + e.sum(1) + torch.ones_like(h).sum(1)
    c = deplokit.compile(model, torch.randn(3, 5, 37), target=target)
    assert c.check(backend="sim").ok
    result = c.nvcc()      # raises on a rejection
    assert result.cubin and len(result.stats) == len(c.kernel_ir.kernels)
