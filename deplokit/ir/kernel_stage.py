"""Kernel-IR statements that stand for a shared-memory stage between two lowering passes.

001_materialize lowers every statement of a Tile kernel but the copies of its Stages: it
leaves a StageCopy where a Stage was, a StageWait where an AsyncWait was and a
StagePrologue before a K loop whose head holds stages. 002_stage_copies replaces them with
the copies (float4, cp.async, TMA), the waits and the barriers (passes/lower/stage_copy.py).
Each records what the copy needs to know about the place it was issued from: the Tile-IR
stage, the K loop it sits in and the ranges of the variables in scope. They print, so the
`-vv` diff of 002 shows what each became; the simulator and the renderer never see them."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageCopy:
    stage: object                       # the Tile-IR Stage
    loop_info: tuple | None             # (enclosing Tile-IR Loop, depth of that loop statement), None
    loop_depth: int                     # loops enclosing the stage
    ranges: tuple[tuple[str, int], ...]  # variables in scope -> extent

    @property
    def shared_array(self) -> str:
        return self.stage.name

    def text(self) -> str:
        return f"stage {self.stage.text()}  # copied by 002_stage_copies"


@dataclass(frozen=True)
class StageWait:
    wait: object                        # the Tile-IR AsyncWait

    def text(self) -> str:
        return f"stage wait {', '.join(self.wait.stages)}  # 002_stage_copies"


@dataclass(frozen=True)
class StagePrologue:
    loop: object                        # the Tile-IR K loop that follows
    depth: int                          # depth of the loop statement
    ranges: tuple[tuple[str, int], ...]

    def text(self) -> str:
        return f"stage prologue of K loop {self.loop.var}  # 002_stage_copies"
