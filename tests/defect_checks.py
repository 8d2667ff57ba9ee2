"""What the defect regression tests share: compile, run on every CPU backend against
eager, and compile the CUDA with nvcc where it is installed."""
from __future__ import annotations

import pytest

import deplokit
from deplokit.runtime.nvcc import nvcc_available

BACKENDS = ("tensor", "loop", "sim")


def check_everywhere(fn, *inputs, atol=None, exact=False, **compile_kwargs):
    """Compile `fn` on `inputs`, check every backend against eager (bit-exact with
    `exact`), compile the CUDA with nvcc when it is present; return the Compilation."""
    c = deplokit.compile(fn, *inputs, **compile_kwargs)
    for backend in BACKENDS:
        result = c.check(backend=backend, rtol=0.0 if exact else 1e-4, atol=0.0 if exact else atol)
        assert result.ok, f"{backend}: {result}"
    if nvcc_available():
        c.nvcc()
    return c


needs_nvcc = pytest.mark.skipif(not nvcc_available(), reason="nvcc (CUDA toolkit) not installed")
