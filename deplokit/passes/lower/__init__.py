"""Tile IR → Kernel IR (materialize) and Kernel IR → CUDA text (render).

LOWERING is the Tile→Kernel lowering as pass records, in order; deplokit/pipeline.py
splices it into the one pipeline between the 16 scheduling passes and render."""
from __future__ import annotations

from ..record import Pass
from .materialize import materialize


def _materialize(program, pctx):
    return materialize(program, pctx.compile)


LOWERING = (Pass("materialize", "kernel", "lower each Tile kernel to a Kernel-IR function (threads, "
                 "shared memory, barriers)", _materialize),)
