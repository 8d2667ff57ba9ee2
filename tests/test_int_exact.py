"""Issue 13 defect 5: integer arithmetic is never a silently wrong number. Every backend (the
tensor and loop interpreters, the simulator, the CUDA) computes int64/int32 exactly at their
width. (64-bit indices for 2**31-element tensors: test_int_width.py.)"""
from __future__ import annotations

import pytest
import torch

import deplokit
from deplokit.runtime.nvcc import nvcc_available

NEAR = {
    "2**24": [2 ** 24 - 1, 2 ** 24, 2 ** 24 + 1, 2 ** 24 + 3, -(2 ** 24) - 5, 7],
    "2**31": [2 ** 31 - 2, 2 ** 31 + 5, -(2 ** 31) - 7, 50_000_000, 3, -1],
    "small": [0, 1, -3, 1000, 4095, 12345],
}

PROGRAMS = {
    "add": lambda x: x + 1,
    "long_add": lambda x: x.long() + 1,
    "mul": lambda x: x * 3 - x,
    "cumsum": lambda x: x.cumsum(0),
    "max_minus": lambda x: x - x.max(),
    "compare": lambda x: (x + 1 > 2 ** 24 + 1).float() + (x == 7).float(),
    "int_to_float": lambda x: x.float() * 2.0,
    "where": lambda x: torch.where(x > 3, x, x * 2),
}


def _input(near: str, dtype) -> torch.Tensor:
    values = NEAR[near]
    if dtype == torch.int32:
        values = [max(min(v, 2 ** 30), -(2 ** 30)) for v in values]   # x * 3 stays in int32
    return torch.tensor(values, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=["int64", "int32"])
@pytest.mark.parametrize("near", sorted(NEAR))
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_integer_arithmetic_exact_on_interpreters(name, near, dtype):
    x = _input(near, dtype)
    c = deplokit.compile(PROGRAMS[name], x)
    for backend in ("tensor", "loop"):
        result = c.check(x, backend=backend)
        assert result.ok, (backend, result)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=["int64", "int32"])
@pytest.mark.parametrize("near", sorted(NEAR))
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_simulator_is_exact(name, near, dtype):
    x = _input(near, dtype)
    c = deplokit.compile(PROGRAMS[name], x)
    got, want = c.run(x, backend="sim"), PROGRAMS[name](x)
    assert got.dtype == want.dtype and torch.equal(got, want), (got, want)


def test_float_to_int_cast_is_exact_on_interpreters():
    x = torch.tensor([1.5, -2.5, 16777216.0, 1e9, -3.0])
    c = deplokit.compile(lambda v: v.long() + 1, x)
    for backend in ("tensor", "loop", "sim"):
        assert torch.equal(c.run(x, backend=backend), x.long() + 1), backend


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_integer_programs_pass_nvcc(name):
    x = _input("small", torch.int64)
    c = deplokit.compile(PROGRAMS[name], x)
    result = c.nvcc()          # raises NvccError when nvcc rejects the text
    assert result.cubin and set(result.stats) == {k.name for k in c.kernel_ir.kernels}
