"""Issue 13 defect 3: an op that returns its input unchanged (clone, contiguous, a
same-shape view, a full slice, cat of one tensor, eval dropout) must not rename the node
it returns: other ops still read it by its name."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from defect_checks import check_everywhere

NOOPS = {
    "clone": lambda v: v.clone(),
    "contiguous": lambda v: v.contiguous(),
    "reshape_same": lambda v: v.reshape(v.shape),
    "view_same": lambda v: v.view(6, 10),
    "expand_same": lambda v: v.expand(6, 10),
    "full_slice": lambda v: v[:, :],
    "cat_one": lambda v: torch.cat([v]),
    "dropout_eval": lambda v: F.dropout(v, 0.3, training=False),
    "detach": lambda v: v.detach(),
    "to_same": lambda v: v.to(torch.float32),
}


@pytest.mark.parametrize("name", sorted(NOOPS))
def test_noop_then_reuse(name):
    noop = NOOPS[name]
    check_everywhere(lambda x: (lambda v: noop(v) * v)(torch.relu(x)), torch.randn(6, 10), exact=True)


@pytest.mark.parametrize("name", sorted(NOOPS))
def test_noop_result_and_source_both_outputs(name):
    """A causal LM's logits and last hidden state: the value and its no-op copy both leave."""
    noop = NOOPS[name]

    def fn(x):
        h = torch.tanh(x)
        return noop(h), h + 1
    check_everywhere(fn, torch.randn(6, 10), atol=1e-6)


def test_chain_of_noops_used_three_times():
    def fn(x):
        v = torch.relu(x)
        w = v.clone().contiguous()[:, :]
        return w * v + w.reshape(6, 10) - v
    check_everywhere(fn, torch.randn(6, 10), atol=1e-6)


def test_noop_of_input_buffer():
    check_everywhere(lambda x: x.clone() * x, torch.randn(6, 10), exact=True)
