"""Defect 13.4: a gather's id tensor read past its end (the inactive branch of a cat or a pad)
and ids outside the table: the loop backend agrees with the simulator and the CUDA, which
clamp the id read and mask the row load (passes/lower/kernel_expr.guard)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import deplokit

PROGRAMS = {
    "embedding_then_cat_rows": (lambda ids, w, y: torch.cat([F.embedding(ids, w), y], dim=0),
                                lambda: (torch.randint(0, 10, (3,)), torch.randn(10, 4), torch.randn(2, 4))),
    "cat_rows_then_embedding": (lambda ids, w, y: torch.cat([y, F.embedding(ids, w), y], dim=0),
                                lambda: (torch.randint(0, 10, (3, 5)), torch.randn(10, 4), torch.randn(2, 5, 4))),
    "index_then_cat_then_cumsum": (lambda ids, w: torch.cat([w[ids], w[ids] * 2], dim=0).cumsum(0),
                              lambda: (torch.randint(0, 7, (5,)), torch.randn(7, 3))),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("backend", ["loop", "sim"])
def test_gather_past_the_end_of_its_ids_matches_eager(name, backend):
    fn, make = PROGRAMS[name]
    torch.manual_seed(0)
    inputs = make()
    c = deplokit.compile(fn, *inputs)
    result = c.check(*inputs, backend=backend)
    assert result.ok, result
