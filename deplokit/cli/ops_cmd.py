"""`deplokit ops`: the Torch-IR operators deplokit lowers, one a line (an unsupported-op error
points here instead of printing them all)."""
from __future__ import annotations

from ..frontend.aten_table import covered_ops


def cmd_ops(args) -> int:
    print("\n".join(covered_ops()))
    return 0
