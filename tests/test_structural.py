"""Structural identity of kernels: equal up to tensor names, different otherwise."""
import torch
from torch import nn

import deplokit
from deplokit.ir.structural import kernel_signature, structural_hash


class TwoNorms(nn.Module):
    def __init__(self, n=64, m=64):
        super().__init__()
        self.a, self.b = nn.Linear(n, n), nn.Linear(m, m)

    def forward(self, x, y):
        return self.a(x).relu(), self.b(y).relu()


def _hashes(c):
    types = c.loop_ir.types()
    return [structural_hash(k, types) for k in c.loop_ir.kernels]


def test_same_structure_different_names_hash_equal():
    c = deplokit.compile(TwoNorms(), torch.randn(4, 64), torch.randn(4, 64))
    hashes = _hashes(c)
    assert len(c.loop_ir.kernels) == 2 and hashes[0] == hashes[1]
    sig = kernel_signature(c.loop_ir.kernels[0], c.loop_ir.types())
    assert "p_a_weight" not in sig and "t0" in sig


def test_different_shapes_hash_differently():
    c = deplokit.compile(TwoNorms(64, 32), torch.randn(4, 64), torch.randn(4, 32))
    hashes = _hashes(c)
    assert hashes[0] != hashes[1]
    assert all(len(h) == 16 for h in hashes)
