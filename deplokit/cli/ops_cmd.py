"""`deplokit ops`: the Torch-IR operators deplokit lowers, one a line (an unsupported-op error
points here instead of printing them all)."""
from __future__ import annotations

from ..frontend.aten_table import covered_ops
from .parser import add_command


def add_parser(sub) -> None:
    add_command(sub, "ops", cmd_ops, help="list the supported operators",
                description="Print the operators deplokit lowers (Torch-IR names, one a line).")


def cmd_ops(args) -> int:
    print("\n".join(covered_ops()))
    return 0
