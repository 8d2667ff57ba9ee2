"""Indexing, gather, argmax/argmin and xor as the fuzzer's templates use them (fuzz/makers.py):
each a failure class the fuzzer found, on every backend and through nvcc."""
import pytest
import torch

import deplokit
from deplokit.runtime.nvcc import nvcc_available

G = torch.Generator().manual_seed(0)


def _ids(lo, hi, *shape):
    return torch.randint(lo, hi, shape, generator=G)


def _randn(*shape):
    return torch.randn(*shape, generator=G)


def _with_nans(rows, cols):
    x = _randn(rows, cols)
    x.view(-1)[torch.randint(0, rows * cols, (3,), generator=G)] = float("nan")
    x[-1, -1] = float("nan")         # a NaN after the extreme, and (on rows) one after another
    return x


PROGRAMS = {
    # aten.index_select was not captured ("operator not supported"): it is x[..., idx] on one axis
    "index_select(0)": (lambda x, i: x.index_select(0, i), (_randn(5, 3), _ids(0, 5, 7))),
    "index_select(-1)": (lambda x, i: x.index_select(-1, i), (_randn(5, 33), _ids(0, 33, 129))),
    "index_select(middle)": (lambda x, i: x.index_select(1, i) * 2, (_randn(2, 31, 3), _ids(0, 31, 1))),
    # a gather inside // and % (a reshaped tensor indexed by ids): lowering raised TypeError
    "flatten()[ids]": (lambda x, i: x.flatten()[i], (_randn(5, 33), _ids(-165, 165, 7))),
    "flatten()[argmax]": (lambda x: x.flatten()[x.argmax().unsqueeze(0)] - x, (_randn(31, 33),)),
    # a tril mask's positions read through a gathered row: a gathered id as a Compute operand
    "tril then x[ids]": (lambda x, w, i: (torch.tril(x, -1).t() @ w)[i],
                         (_randn(1000, 31), _randn(1000, 3), _ids(-31, 31, 3, 3))),
    "triu then x[:, ids]": (lambda x, i: torch.triu(x, 1)[:, i], (_randn(33, 31), _ids(-31, 31, 5))),
    # torch.logical_xor was not captured (only the bitwise spellings were)
    "logical_xor": (lambda x, y: torch.where(torch.logical_xor(x > 0, y > 0), x, -x), (_randn(5, 33), _randn(33))),
    "gather(argmin)": (lambda x: torch.gather(x, 0, x.argmin(0, keepdim=True)), (_randn(129, 3),)),
    "argmax(all)": (lambda x: torch.argmax(x).float() + x, (_randn(3, 1000),)),
    # NaN is the extreme for torch: the first NaN's position (it was n, past the row)
    "argmax(NaN)": (lambda x: x.argmax(-1), (_with_nans(4, 33),)),
    "argmin(NaN,dim 0)": (lambda x: x.argmin(0, keepdim=True), (_with_nans(33, 4),)),
    "max(dim,NaN)": (lambda x: x.max(-1), (_with_nans(4, 1000),)),
    "argmin(all,NaN)": (lambda x: torch.argmin(x), (_with_nans(3, 31),)),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_matches_eager_on_every_backend(name):
    fn, inputs = PROGRAMS[name]
    c = deplokit.compile(fn, *inputs)
    want = fn(*inputs)
    for backend in ("tensor", "loop", "sim"):
        torch.testing.assert_close(c.run(*inputs, backend=backend), want, rtol=1e-4, atol=1e-4, equal_nan=True,
                                   msg=backend)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("name", ("flatten()[ids]", "tril then x[ids]", "index_select(-1)"))
def test_program_passes_nvcc(name):
    fn, inputs = PROGRAMS[name]
    deplokit.compile(fn, *inputs).nvcc()      # raises NvccError when nvcc rejects the text
