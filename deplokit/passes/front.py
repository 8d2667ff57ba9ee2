"""Torch IR -> the Loop IR the schedule starts from: the whole-program passes before the 16, in
order, as pass records (deplokit/pipeline.py splices FRONT, SCHEDULE and LOWERING into the one
pipeline; the tuner's program-level choices are the knobs of FRONT's Loop-IR passes)."""
from __future__ import annotations

from . import dedup
from .decompose import program as decompose
from .flash import attention
from .fuse import fusion, lift
from .rows import rows
from .split import split_reduce

FRONT = (
    decompose.PASS,     # Torch IR -> Tensor IR (passes/decompose/program.py)
    lift.PASS,          # Tensor IR -> Loop IR, one nest per node (passes/fuse/)
    fusion.PASS,
    attention.PASS,
    rows.PASS,
    split_reduce.PASS,
    dedup.PASS,
)
