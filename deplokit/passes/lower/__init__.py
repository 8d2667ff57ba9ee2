"""Tile IR -> Kernel IR (the numbered lowering passes, each a traced step) and Kernel IR ->
CUDA text (render).

LOWERING is the Tile->Kernel lowering as pass records, in order (k001_materialize,
k002_stage_copies, k003_unclash_names, k004_reconverge_warps); deplokit/pipeline.py splices it
into the one pipeline between the 16 scheduling passes and render. The passes read the
decisions the schedule stamped on the Tile IR (vector widths, register-tile shapes, split-K
workspaces) and talk through public data only (lowering_state.LoweringState)."""
from __future__ import annotations

from . import k001_materialize, k002_stage_copies, k003_unclash_names, k004_reconverge_warps

LOWERING = (k001_materialize.PASS, k002_stage_copies.PASS, k003_unclash_names.PASS, k004_reconverge_warps.PASS)

