"""A check against torch eager as HTML, and where it ran: shared by a CheckResult's own
rendering (reprs) and a Compilation's overview, so neither imports the other."""
from __future__ import annotations

from ..runtime.device import gpu_available
from .style import BAD, OK, esc, note

_BACKEND_NAMES = {"sim": "the SIMT simulator (numpy, on the CPU)", "tensor": "the Tensor-IR numpy interpreter",
                  "loop": "the Loop-IR numpy interpreter", "cupy": "the GPU (CuPy)"}


def count(n: int, word: str) -> str:
    """`1 kernel`, `2 kernels`."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def backend_note(backend: str) -> str:
    """Where an execution ran, said plainly: without a GPU everything runs on the simulator."""
    if backend == "auto":
        return "backend auto" if gpu_available() else \
            "ran on the SIMT simulator (numpy, on the CPU): no GPU found"
    where = _BACKEND_NAMES.get(backend, backend)
    return f"ran on {where}" + ("" if gpu_available() or backend == "cupy" else ": no GPU found")


def check_html(result) -> str:
    """A check against torch eager, saying which backend ran (the simulator without a GPU)."""
    color = OK if result.ok else BAD
    word = "✓ matches torch eager" if result.ok else "✗ MISMATCH with torch eager"
    verdict = "every element" if result.ok else "some element not"
    return (f'<span style="color: {color}; font-weight: bold">{word}</span> '
            f"<span>({verdict} within atol + rtol·|expected|, rtol {result.rtol:g}, atol {result.atol:.3g}): "
            f"max abs error {result.max_abs_error:.3g}, max rel error {result.max_rel_error:.3g}</span>"
            + note(esc(backend_note(result.backend))))
