"""Tile IR → Kernel IR (materialize) and Kernel IR → CUDA text (render).

LOWERING is the Tile→Kernel lowering as pass records, in order; deplokit/pipeline.py
splices it into the one pipeline between the 16 scheduling passes and render."""
from __future__ import annotations

from ...trace import Context
from ..record import Pass, run_passes
from .materialize import materialize


def _materialize(program, pctx):
    return materialize(program, pctx.compile)


LOWERING = (Pass("materialize", "kernel", "lower each Tile kernel to a Kernel-IR function (threads, "
                 "shared memory, barriers)", _materialize),)


def lower_tiles(program, ctx: Context):
    """A Tile program through LOWERING: its Kernel program (what Compilation.check_passes and
    the tuner's objectives lower an intermediate or a candidate schedule with)."""
    return run_passes(LOWERING, program, ctx)[0]
