"""Issue 13 defect 4: the Loop-IR interpreter evaluated a gather's index tensor at points a
padded load (cat) discards, reading past the index tensor (IndexError). An embedding
followed by cat, in every position and along every axis, on every backend."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from defect_checks import check_everywhere
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
    emb = nn.Embedding(100, 16)
    check_everywhere(lambda ids, p: torch.cat([emb(ids), p], 1), torch.randint(0, 100, (2, 8)),
                     torch.randn(2, 3, 16), exact=True)


def test_gather_index_outside_the_index_tensor_is_clamped():
    """Where the index runs past the index tensor the value is discarded by the padded load;
    evaluating it must not raise, and inside the tensor it is the tensor's value."""
    ids = np.array([4, 2, 0], dtype=np.int64)
    got = evaluate(as_affine(Gather("ids", (var("i"),))), {"i": np.arange(5)}, {"ids": ids})
    assert list(got[:3]) == [4, 2, 0]
