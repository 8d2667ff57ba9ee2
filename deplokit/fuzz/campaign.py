"""The fuzz campaign: `fuzz(seed, cases)` runs generated cases and keeps, per failure class,
the smallest case that shows it with a one-line reproducer (a FuzzReport). See __init__.py."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .programs import declared_knobs, generate
from .runner import Outcome, reproducer, run_case
from .templates import covered_templates

__all__ = ["FuzzReport", "fuzz"]


@dataclass
class FuzzReport:
    seed: int
    cases: int = 0
    ok: int = 0
    refused: int = 0
    failures: dict = field(default_factory=dict)     # failure class -> [Outcome, ...]
    refusals: dict = field(default_factory=dict)     # masked refusal -> count
    seconds: float = 0.0

    def add(self, out: Outcome) -> None:
        self.cases += 1
        if out.status == "ok":
            self.ok += 1
        elif out.status == "refused":
            self.refused += 1
            key = out.failure_class
            self.refusals[key] = self.refusals.get(key, 0) + 1
        else:
            self.failures.setdefault(out.failure_class, []).append(out)

    def smallest(self, key: str) -> Outcome:
        return min(self.failures[key], key=lambda o: (len(o.case.ops), len(o.case.text)))

    def summary(self) -> str:
        lines = [f"fuzz seed {self.seed}: {self.cases} cases, {self.ok} ok, {self.refused} refused, "
                 f"{sum(map(len, self.failures.values()))} failed in {len(self.failures)} classes "
                 f"({self.seconds:.0f} s)"]
        for key in sorted(self.failures):
            o = self.smallest(key)
            lines.append(f"FAIL [{len(self.failures[key])}x] {key}")
            lines.append(f"  ops: {' -> '.join(o.case.ops)}; target {o.case.target}; config {o.case.config}")
            lines.append(f"  message: {o.message.splitlines()[0][:300] if o.message else ''}")
            lines.append(f"  repro: {reproducer(o.case, o.stage)}")
        for key, n in sorted(self.refusals.items(), key=lambda kv: -kv[1]):
            lines.append(f"refused [{n}x] {key}")
        return "\n".join(lines)


def fuzz(seed: int = 0, cases: int = 50, timeout: float = 60.0, budget: float | None = None,
         nvcc_every: int = 0, start: int = 0, log=None, dtype: str = "float32") -> FuzzReport:
    """Run cases start .. start+cases-1 of `seed` (fewer if `budget` seconds run out)."""
    torch.set_num_threads(1)
    templates, knobs = covered_templates(), declared_knobs()
    report = FuzzReport(seed)
    t0 = time.perf_counter()
    for i in range(start, start + cases):
        if budget is not None and time.perf_counter() - t0 > budget:
            break
        case = generate(seed, i, templates, knobs, dtype)
        out = run_case(case, timeout=timeout, nvcc=bool(nvcc_every) and i % nvcc_every == 0, twice=i % 4 == 0)
        report.add(out)
        if log is not None:
            log(f"[{i}] {out.status:7s} {out.seconds:5.1f}s {out.failure_class if out.status != 'ok' else ''}"
                f"  {' -> '.join(case.ops)}")
    report.seconds = time.perf_counter() - t0
    return report
