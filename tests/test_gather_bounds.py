"""A gather's id tensor read past its end (issue 13 defect 4: the inactive branch of a cat or
a pad evaluated a gather's ids at points the padded load discards): every backend agrees
with eager, bit for bit. The Loop-IR interpreter clamps the id read (ir.index.evaluate); the
simulator and the CUDA clamp it and mask the row load (ir/kernel_expr.guard)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from defect_checks import check_everywhere
from torch import nn

from deplokit.ir.index import Gather, as_affine, evaluate, var


@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("dim", [0, 1])
def test_embedding_then_cat(where, dim):
    torch.manual_seed(0)
    emb = nn.Embedding(50, 12)
    ids = torch.randint(0, 50, (7,))
    other = torch.randn(3, 12) if dim == 0 else torch.randn(7, 5)

    def fn(ids, other):
        e = emb(ids)
        parts = {"first": [e, other], "middle": [other, e, other], "last": [other, e]}[where]
        return torch.cat(parts, dim)
    check_everywhere(fn, ids, other, exact=True)


def test_batched_embedding_then_cat_on_sequence():
    torch.manual_seed(0)
    emb = nn.Embedding(100, 16)
    check_everywhere(lambda ids, p: torch.cat([emb(ids), p], 1), torch.randint(0, 100, (2, 8)),
                     torch.randn(2, 3, 16), exact=True)


def test_batched_embedding_between_cat_rows():
    torch.manual_seed(0)
    w = torch.randn(10, 4)
    check_everywhere(lambda ids, y: torch.cat([y, torch.nn.functional.embedding(ids, w), y], dim=0),
                     torch.randint(0, 10, (3, 5)), torch.randn(2, 5, 4), exact=True)


def test_index_then_cat_then_cumsum():
    torch.manual_seed(0)
    check_everywhere(lambda ids, w: torch.cat([w[ids], w[ids] * 2], dim=0).cumsum(0),
                     torch.randint(0, 7, (5,)), torch.randn(7, 3), atol=1e-5)


def test_gather_index_outside_the_index_tensor_is_clamped():
    """Where the index runs past the index tensor the value is discarded by the padded load;
    evaluating it must not raise, and inside the tensor it is the tensor's value."""
    ids = np.array([4, 2, 0], dtype=np.int64)
    got = evaluate(as_affine(Gather("ids", (var("i"),))), {"i": np.arange(5)}, {"ids": ids})
    assert list(got[:3]) == [4, 2, 0]
