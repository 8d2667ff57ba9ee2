"""What a tuning run returns and what its listener sees after every trial."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Trial:
    index: int                              # 0, 1, 2, ... in the order trials finished
    config: tuple[tuple[str, object], ...]  # ("005_blockify_launch.block_threads", 128), ...
    cost_us: float | None                   # measured (gpu) or predicted (model) µs; None if it failed
    best_us: float | None                   # best cost so far, this trial included
    ok: bool
    error: str = ""                         # why the config failed (illegal, nvcc, mismatch)
    cached: bool = False                    # read from the cache, not run again


@dataclass(frozen=True)
class TuneResult:
    key: str                                # program's structural hash
    target: str
    objective: str                          # gpu | model
    history: tuple[Trial, ...]
    default: Trial | None                   # the passes' own heuristics, for comparison

    @property
    def best(self) -> Trial | None:
        done = [t for t in self.history if t.ok and t.cost_us is not None]
        return min(done, key=lambda t: (t.cost_us, t.index)) if done else None
