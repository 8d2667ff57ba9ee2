"""Small tables the notebooks show instead of print(): a table in Jupyter, aligned text at a
Python prompt. What they list comes from the passes, the search space and a TuneResult."""
from __future__ import annotations

from dataclasses import dataclass

from ..passes.schedule import SCHEDULE
from .style import box, esc, note, scroll_x, table, title


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""
    footnote: str = ""

    def __str__(self) -> str:
        widths = [max(len(str(r[i])) for r in (self.header,) + self.rows) for i in range(len(self.header))]
        lines = [self.caption] if self.caption else []
        for r in (self.header,) + self.rows:
            lines.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
        if self.footnote:
            lines.append(self.footnote)
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        rows = [[f"<code>{esc(c)}</code>" if i == 0 else esc(c) for i, c in enumerate(r)] for r in self.rows]
        head = title(esc(self.caption)) if self.caption else ""
        return box(head + scroll_x(table([esc(h) for h in self.header], rows))
                   + (note(esc(self.footnote)) if self.footnote else ""))


def knobs_table() -> Table:
    """Every knob of the scheduling passes: its pass, domain and what it decides."""
    rows = tuple((f"{p.name}.{k.name}", ", ".join(str(v) for v in k.domain), k.doc) for p in SCHEDULE for k in p.knobs)
    return Table(("knob", "domain", "what it decides"), rows, f"{len(rows)} knobs in {len(SCHEDULE)} passes")


def space_table(spaces, probes: int = 200) -> Table:
    """Per kernel search space: the raw cross-product of knob values and the estimated number
    of distinct legal schedules (KernelSpace.estimate_size, seeded: the same every run)."""
    rows = tuple((s.kernel_name, f"{s.raw_combinations():,}", f"≈ {s.estimate_size(probes):,.0f}") for s in spaces)
    return Table(("kernel", "knob combinations", "distinct legal schedules"), rows,
                 footnote=f"estimated from {probes} random walks down the tree (Knuth's estimator); "
                          "KernelSpace.size() counts them exactly, which takes minutes for a matmul")


def tune_table(result) -> Table:
    """The schedule the compilation started from (trial 0) against the best one: their
    predicted (or measured) times and the knobs in effect on which they differ; the last line
    says, from the numbers, whether the search found anything better."""
    default, best = result.default, result.best
    unit = "µs (model)" if result.objective == "model" else "µs (measured)"
    rows = [("time", f"{default.cost_us:.3g} {unit}", f"{best.cost_us:.3g} {unit}")]
    before = dict(default.config)
    effect = result.in_effect_for(best.kernel)
    knobs = best.config if effect is None else effect
    rows += [(k, str(before.get(k)), str(v)) for k, v in knobs if before.get(k) != v]
    if best.cost_us < default.cost_us:
        verdict = (f"the search found a schedule {default.cost_us / best.cost_us:.2f}x faster than the start "
                   f"({default.cost_us:.3g} -> {best.cost_us:.3g} {unit})")
    else:
        verdict = "the start (the schedule the compilation was made with) was the best one found"
    return Table(("", "start, as compiled (trial 0)", f"best (trial {best.index})"), tuple(rows),
                 f"{len(result.history)} trials, {result.objective} objective", verdict)
