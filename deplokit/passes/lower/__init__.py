"""Tile IR -> Kernel IR (the numbered lowering passes k001.., each a traced step) and
Kernel IR -> CUDA text (render).

Each lowering pass is a module with NAME, DESCRIPTION and apply(ir, ctx) -> IR; the first
takes the Tile program, the others a Kernel program. They read the decisions the schedule
stamped on the Tile IR (vector widths, register-tile shapes, split-K zero-init) and talk
through public data only."""
from . import k001_materialize, k002_zero_init

LOWERING = (k001_materialize, k002_zero_init)
