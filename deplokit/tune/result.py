"""What a tuning run returns and what its listener sees after every trial."""
from __future__ import annotations

from dataclasses import dataclass

PROGRAM = "(program)"           # the kernel field of a program-level trial (fusion, splits)


@dataclass(frozen=True)
class Trial:
    index: int                              # 0, 1, 2, ... in the order trials finished
    config: tuple[tuple[str, object], ...]  # ("005_blockify_launch.block_threads", 128), ...
    cost_us: float | None                   # measured (gpu) or predicted (model) µs; None if it failed
    best_us: float | None                   # best cost so far, this trial included
    ok: bool
    error: str = ""                         # why the config failed (illegal, nvcc, mismatch)
    cached: bool = False                    # read from the cache, not run again
    kernel: str = ""                        # the Loop-IR kernel the config schedules ("" for one)
    default: bool = False                   # the start: the config the compilation was made with


@dataclass(frozen=True)
class TuneResult:
    key: str                                # program's structural hash
    target: str
    objective: str                          # gpu | model
    history: tuple[Trial, ...]
    default: Trial | None                   # the passes' own heuristics, for comparison
    # Each tuned kernel with every kernel of the program that has its structure (tuned once).
    kernels: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The program-level choices compared first (kernel "(program)"), and the one the kernels
    # were tuned under (empty when the program-level knobs make one program only).
    programs: tuple[Trial, ...] = ()
    program_config: tuple[tuple[str, object], ...] = ()
    # Per tuned kernel, the knobs of its best config its kernel depends on (KernelSpace.in_effect):
    # a knob whose every value gives the same kernel (a matmul knob on RMSNorm) is not listed.
    in_effect: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = ()

    @property
    def best(self) -> Trial | None:
        done = [t for t in self.history if t.ok and t.cost_us is not None]
        return min(done, key=lambda t: (t.cost_us, t.index)) if done else None

    def best_for(self, kernel: str) -> Trial | None:
        done = [t for t in self.history if t.kernel == kernel and t.ok and t.cost_us is not None]
        return min(done, key=lambda t: (t.cost_us, t.index)) if done else None

    def in_effect_for(self, kernel: str) -> tuple[tuple[str, object], ...] | None:
        """The knobs of `kernel`'s best config that change its kernel (None: not known)."""
        return dict(self.in_effect).get(kernel)

    def default_for(self, kernel: str) -> Trial | None:
        return next((t for t in self.history if t.kernel == kernel and t.default), None)

    @property
    def best_config(self) -> dict:
        """The program-level choice and the union of every kernel's best config, keyed `kernel:NNN_pass.knob` for each kernel of
        the program that shares the tuned kernel's structure: pass it to deplokit.compile(config=...)."""
        out: dict = dict(self.program_config)
        for tuned, names in self.kernels:
            best = self.best_for(tuned)
            if best is not None:
                for name in names:
                    out.update({f"{name}:{k}": v for k, v in best.config})
        return out
