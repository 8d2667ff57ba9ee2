"""Plots (matplotlib): benchmark bars, a roofline and autotune progress.

They draw only what they are given: BenchReport records (runtime/bench_report.py, filled
from real GPU timings) and tuner Trial records (tune/result.py). Nothing here measures or
invents a number. Figures are made with pyplot and closed at once, so a notebook shows the
returned figure once and no global figure is left behind."""
from __future__ import annotations

import base64
import io
import math
import time
from typing import Sequence

from ..errors import DeplokitError
from ..tune.result import PROGRAM
from .extra import require

DEPLOKIT_COLOR, EAGER_COLOR, COMPILE_COLOR = "#1f77b4", "#7f7f7f", "#ff7f0e"
# A PNG cannot read JupyterLab's CSS variables: figures are drawn on a transparent background
# with text, axes and lines in a grey that reads on the light theme's white and the dark
# theme's near-black (contrast over 4:1 on both).
INK = "#777777"


def _new_figure(width: float, height: float):
    plt = require("matplotlib.pyplot", "plotting")
    fig = plt.figure(figsize=(width, height))
    plt.close(fig)
    return fig


def for_both_themes(fig):
    """`fig` readable in JupyterLab's light and dark themes: transparent figure and axes
    backgrounds (the page's own colour shows through), INK for text, ticks, spines and
    legend, and a legend without its white box. Returns `fig`."""
    fig.patch.set_alpha(0)
    for text in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "set_color")):
        text.set_color(INK)
    for ax in fig.axes:
        ax.set_facecolor("none")
        for spine in ax.spines.values():
            spine.set_edgecolor(INK)
        ax.tick_params(which="both", colors=INK)
        legend = ax.get_legend()
        if legend is not None:
            legend.get_frame().set_alpha(0)
            legend.get_frame().set_edgecolor(INK)
    return fig


def bench_bars(reports: Sequence, title: str | None = None):
    """Time per program for deplokit, torch eager and torch.compile (log scale), each
    deplokit bar labelled with its % of the roof that bounds it (HBM or FP32) and each
    program with deplokit's speed-up over eager."""
    if not reports:
        raise DeplokitError("bench_bars needs at least one BenchReport")
    from matplotlib.ticker import FuncFormatter, LogFormatter
    fig = _new_figure(max(6.0, 1.2 * len(reports) + 2), 4.2)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.27
    series = (("deplokit (label: % of peak)", DEPLOKIT_COLOR, lambda r: r.deplokit_us),
              ("eager", EAGER_COLOR, lambda r: r.eager_us),
              ("torch.compile", COMPILE_COLOR, lambda r: r.compile_us))
    for k, (label, color, get) in enumerate(series):
        shown = [(i, r) for i, r in enumerate(reports) if get(r)]
        bars = ax.bar([i + (k - 1) * width for i, _ in shown], [get(r) for _, r in shown], width,
                      label=label, color=color)
        if k == 0:
            for bar, (_, r) in zip(bars, shown):
                ax.annotate(f"{r.pct_of_peak:.0f}%", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.4)))
    ax.set_ylabel("time (µs, log scale)")
    ax.set_xticks(range(len(reports)))
    names = [r.name + (f"\n{r.speedup_vs_eager:.2f}× vs eager" if r.speedup_vs_eager else "") for r in reports]
    tilt = len(reports) > 4
    ax.set_xticklabels(names, rotation=30 if tilt else 0, ha="right" if tilt else "center", fontsize=8)
    gpus = sorted({r.gpu for r in reports})
    ax.set_title(title or f"deplokit vs eager vs torch.compile · {', '.join(gpus)}", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.margins(y=0.15)
    fig.tight_layout()
    return for_both_themes(fig)


def _points(reports):
    """(label, arithmetic intensity FLOP/byte, achieved GFLOP/s) per kernel; per program
    where a report has no kernel profiles. Kernels with no FLOPs or bytes have no place on
    a log-log roofline and are left out."""
    out = []
    for r in reports:
        items = [(f"{r.name}:{k.name}", k.flops, k.bytes, k.time_us) for k in r.kernels] or \
            [(r.name, r.flops, r.bytes, r.deplokit_us)]
        for label, flops, nbytes, t in items:
            if flops > 0 and nbytes > 0 and t > 0:
                out.append((label, flops / nbytes, flops / (t * 1e3)))
    return out


def roofline(reports: Sequence, title: str | None = None, label_limit: int = 12):
    """Achieved GFLOP/s against arithmetic intensity for the suite's kernels, under the
    roofs of the reports' GPU (its peak HBM bandwidth and peak FP32)."""
    if not reports:
        raise DeplokitError("roofline needs at least one BenchReport")
    peak_bw = max(r.peak_bandwidth_gbs for r in reports)           # GB/s
    peak_flops = max(r.peak_fp32_tflops for r in reports) * 1e3    # GFLOP/s
    points = _points(reports)
    fig = _new_figure(6.5, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    ridge = peak_flops / peak_bw
    lo = min([p[1] for p in points] + [ridge / 100]) / 2
    hi = max([p[1] for p in points] + [ridge * 10]) * 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(peak_flops, x * peak_bw) for x in xs], color=INK, linewidth=1.5,
            label=f"roof: {peak_bw:g} GB/s, {peak_flops / 1e3:g} TFLOP/s")
    ax.axvline(ridge, color="gray", linestyle=":", linewidth=1)
    if points:
        ax.scatter([p[1] for p in points], [p[2] for p in points], color=DEPLOKIT_COLOR, zorder=3,
                   label=f"deplokit kernels ({len(points)})")
        if len(points) <= label_limit:
            for label, x, y in points:
                ax.annotate(label, (x, y), fontsize=7, xytext=(4, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved GFLOP/s")
    gpus = sorted({r.gpu for r in reports})
    ax.set_title(title or f"roofline on {', '.join(gpus)}", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(which="both", alpha=0.2)
    fig.tight_layout()
    return for_both_themes(fig)


def kernel_roofline(roof, title: str | None = None):
    """A deplokit.tune.roofline.Roofline drawn: the target's two ceilings, and per kernel
    with FLOPs the cost model's predicted GFLOP/s (filled), the ceiling at its intensity
    (hollow) and, where a GPU ran it, the measured GFLOP/s (a star). Kernels without FLOPs
    (a zero fill) have no place on a log-log roofline and are left out."""
    points = [p for p in roof.points if p.flops > 0 and p.bytes > 0]
    fig = _new_figure(6.5, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    lo = min([p.intensity for p in points] + [roof.ridge / 100]) / 2
    hi = max([p.intensity for p in points] + [roof.ridge * 10]) * 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(roof.peak_gflops, x * roof.peak_bandwidth_gbs) for x in xs], color=INK, linewidth=1.5,
            label=f"{roof.gpu}: {roof.peak_bandwidth_gbs:g} GB/s, {roof.peak_gflops / 1e3:g} TFLOP/s")
    ax.axvline(roof.ridge, color="gray", linestyle=":", linewidth=1)
    for k, p in enumerate(points):
        color = f"C{k % 10}"
        ax.scatter([p.intensity], [p.gflops(p.roof_us)], facecolors="none", edgecolors=color, s=40, zorder=3)
        ax.scatter([p.intensity], [p.gflops(p.predicted_us)], color=color, s=40, zorder=3,
                   label=f"{p.name}: model {p.predicted_us:.3g} µs")
        ax.annotate("", (p.intensity, p.gflops(p.predicted_us)), (p.intensity, p.gflops(p.roof_us)),
                    arrowprops={"arrowstyle": "->", "color": color, "alpha": 0.5})
        if p.measured_us:
            ax.scatter([p.intensity], [p.gflops(p.measured_us)], marker="*", color=color, s=90, zorder=4,
                       label=f"{p.name}: measured {p.measured_us:.3g} µs")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / compulsory byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title or f"{roof.target}: ceiling (hollow) → cost model (filled)"
                 + (f", measured on {roof.measured_on} (star)" if roof.measured_on else ""), fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(which="both", alpha=0.2)
    fig.tight_layout()
    return for_both_themes(fig)


def figure_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, metadata={"Software": None}, transparent=True)
    return buf.getvalue()


class TuneProgressPlot:
    """A tuner listener: `listener(trial)` after every trial; the figure shows each trial's
    cost (log scale), the best so far and the default schedule's cost, and `.widget` (an
    ipywidgets Output) is redrawn live.

    Redraws are spaced by at least `min_interval` seconds so that a fast tuner is not
    slowed by drawing; `refresh()` draws the latest state (call it at the tuner's end).
    `show()` displays it with a display id, so that refresh() also replaces the displayed
    output: a saved notebook then holds the final plot, not the empty one of the start."""

    def __init__(self, objective: str = "", min_interval: float = 0.5):
        self.objective = objective          # "gpu" (measured) or "model" (predicted), for the label
        self.min_interval = min_interval
        self.trials: list = []
        self._widget = None
        self._handle = None
        self._last_draw = None

    def __call__(self, trial) -> None:
        if getattr(trial, "kernel", "") == PROGRAM:
            return                          # a program-level choice, priced before the kernels' trials
        self.trials.append(trial)
        now = time.monotonic()
        if self._last_draw is None or now - self._last_draw >= self.min_interval:
            self.refresh()

    @property
    def best_so_far(self) -> list[float | None]:
        best, out = math.inf, []
        for t in self.trials:
            if t.ok and t.cost_us is not None:
                best = min(best, t.cost_us)
            out.append(None if best == math.inf else best)
        return out

    @property
    def default_cost(self) -> float | None:
        """The cost of the passes' own schedule (the trial marked default), if it ran."""
        return next((t.cost_us for t in self.trials if getattr(t, "default", False) and t.ok), None)

    def figure(self):
        from matplotlib.ticker import FuncFormatter, MaxNLocator
        fig = _new_figure(6.5, 3.6)
        ax = fig.add_subplot(1, 1, 1)
        ok = [t for t in self.trials if t.ok and t.cost_us is not None]
        failed = [t for t in self.trials if not (t.ok and t.cost_us is not None)]
        ax.scatter([t.index for t in ok], [t.cost_us for t in ok], s=12, color=DEPLOKIT_COLOR, alpha=0.85,
                   label="trial")
        best = self.best_so_far
        steps = [(t.index, b) for t, b in zip(self.trials, best) if b is not None]
        if steps:
            ax.step([s[0] for s in steps], [s[1] for s in steps], where="post", color=INK, label="best so far")
        default = self.default_cost
        if default is not None:
            ax.axhline(default, color=COMPILE_COLOR, linestyle="--", linewidth=1,
                       label=f"default schedule ({default:.3g} µs)")
        if failed and ok:
            top = max(t.cost_us for t in ok)
            ax.scatter([t.index for t in failed], [top] * len(failed), marker="x", color="#d62728", s=14,
                       label=f"failed ({len(failed)})")
        if ok and all(t.cost_us > 0 for t in ok):
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            costs = [t.cost_us for t in ok]
            # within a decade no major tick may fall on the axis: label every minor one then
            narrow = max(costs) < 10 * min(costs)
            ax.yaxis.set_minor_formatter(FuncFormatter(
                lambda v, _: f"{v:g}" if narrow or str(f"{v:g}")[0] in "25" else ""))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("trial")
        ylabel = {"gpu": "measured time (µs)", "model": "predicted time (µs)"}.get(self.objective, "cost (µs)")
        ax.set_ylabel(ylabel + (", log scale" if ax.get_yscale() == "log" else ""))
        title = f"autotune: {len(self.trials)} trials"
        if steps:
            title += f", best {steps[-1][1]:.4g} µs"
        ax.set_title(title, fontsize=10)
        if ok or failed:
            ax.legend(fontsize=8)
        ax.grid(alpha=0.3, which="both")
        fig.tight_layout()
        return for_both_themes(fig)

    @property
    def widget(self):
        if self._widget is None:
            ipywidgets = require("ipywidgets", "the live tuning plot")
            self._widget = ipywidgets.Output()
            self.refresh()
        return self._widget

    def show(self) -> None:
        """Display the plot, keeping a handle that refresh() updates."""
        from IPython.display import display
        self._handle = display(self, display_id=True)

    def refresh(self) -> None:
        """Redraw into the widget (once it has been asked for) and the shown output."""
        self._last_draw = time.monotonic()
        if self._widget is None:
            return
        # Replace the Output's content outright: no kernel context is needed, so this works
        # from the tuner's thread and from tests alike.
        self._widget.outputs = ({"output_type": "display_data", "metadata": {},
                                 "data": {"image/png": self._png(), "text/plain": self._text()}},)
        if self._handle is not None:
            self._handle.update(self)

    def _png(self) -> str:
        return base64.b64encode(figure_png(self.figure())).decode("ascii")

    def _text(self) -> str:
        return f"<autotune progress: {len(self.trials)} trials>"

    def _repr_mimebundle_(self, include=None, exclude=None):
        try:
            bundle = dict(self.widget._repr_mimebundle_(include=include, exclude=exclude))
        except ImportError:     # NotebookExtraMissing included
            return {"text/plain": self._text()}
        # the Output widget's own text would spell out its PNG in base64; a static view of
        # the notebook (no widget manager) shows the PNG
        bundle["text/plain"] = self._text()
        bundle["image/png"] = self._png()
        return bundle
