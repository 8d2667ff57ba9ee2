"""Plots, headless (Agg). The BenchReport and Trial records below are TEST DATA made up to
exercise the drawing code; they are not measurements and are labelled as such."""
import matplotlib

matplotlib.use("Agg")

import dataclasses  # noqa: E402

import pytest  # noqa: E402

from deplokit import DeplokitError  # noqa: E402
from deplokit.notebook.plots import TuneProgressPlot, bench_bars, figure_png, roofline  # noqa: E402
from deplokit.runtime.bench_report import BenchReport, KernelProfile  # noqa: E402
from deplokit.tune.result import Trial  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def _reports():
    kernels = (KernelProfile("TEST-k0", 10.0, 1, 8_000_000, 2_000_000, 32, 1024, 0.5),
               KernelProfile("TEST-k1", 50.0, 1, 4_000_000, 400_000_000, 64, 0, 0.5))
    return [BenchReport("TEST-DATA a", "TEST-GPU", "sm_90", 12.0, 15.0, 13.0, 8_000_000, 2_000_000, 3350.0, 67.0,
                        kernels),
            BenchReport("TEST-DATA b", "TEST-GPU", "sm_90", 30.0, 45.0, None, 16_000_000, 4_000_000, 3350.0, 67.0)]


def test_bench_bars():
    reports = _reports()
    fig = bench_bars(reports)
    ax = fig.axes[0]
    heights = [[round(p.get_height(), 6) for p in c] for c in ax.containers]
    assert heights == [[12.0, 30.0], [15.0, 45.0], [13.0]]      # deplokit, eager, torch.compile (none for b)
    labels = [t.get_text() for t in ax.texts]
    assert labels == [f"{r.pct_of_peak:.0f}%" for r in reports]
    assert ax.get_yscale() == "log"
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks[0] == "TEST-DATA a\n1.25× vs eager"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["deplokit (label: % of peak)", "eager",
                                                                   "torch.compile"]
    assert figure_png(fig).startswith(PNG)


def test_roofline():
    fig = roofline(_reports())
    ax = fig.axes[0]
    roof = ax.lines[0]
    ys = roof.get_ydata()
    assert max(ys) == pytest.approx(67_000.0)                    # the FP32 roof, GFLOP/s
    xs = roof.get_xdata()
    assert ys[0] == pytest.approx(xs[0] * 3350.0)                # the bandwidth roof at low intensity
    points = ax.collections[0].get_offsets()
    # the per-kernel points of report a, the program point of report b (no kernel profiles)
    assert len(points) == 3
    assert points[0][0] == pytest.approx(2_000_000 / 8_000_000)
    assert points[0][1] == pytest.approx(2_000_000 / (10.0 * 1e3))
    assert [t.get_text() for t in ax.texts] == ["TEST-DATA a:TEST-k0", "TEST-DATA a:TEST-k1", "TEST-DATA b"]


def test_empty_inputs_are_clear_errors():
    with pytest.raises(DeplokitError, match="at least one BenchReport"):
        bench_bars([])
    with pytest.raises(DeplokitError, match="at least one BenchReport"):
        roofline([])


def _trials():
    costs = [9.0, None, 7.0, 8.0, 5.0, 6.0]
    best, out = None, []
    for i, c in enumerate(costs):
        if c is not None:
            best = c if best is None else min(best, c)
        out.append(Trial(i, (("005_blockify_launch.block_threads", 64 * (i + 1)),), c, best, c is not None,
                         "" if c is not None else "TEST: illegal config"))
    return out


def test_tune_progress_listener_updates_live():
    pytest.importorskip("ipywidgets")
    plot = TuneProgressPlot("model", min_interval=0)
    widget = plot.widget
    assert len(widget.outputs) == 1                              # drawn empty at once
    for t in _trials():
        plot(t)
        out = widget.outputs
        assert len(out) == 1 and out[0]["data"]["text/plain"] == f"<autotune progress: {t.index + 1} trials>"
    assert plot.best_so_far == [9.0, 9.0, 7.0, 7.0, 5.0, 5.0]
    fig = plot.figure()
    ax = fig.axes[0]
    assert ax.get_title() == "autotune: 6 trials, best 5 µs"
    assert ax.get_ylabel() == "predicted time (µs), log scale" and ax.get_yscale() == "log"
    assert all(float(t).is_integer() for t in ax.get_xticks())   # trials are whole numbers
    ok_points = ax.collections[0].get_offsets()
    assert [tuple(p) for p in ok_points] == [(0, 9.0), (2, 7.0), (3, 8.0), (4, 5.0), (5, 6.0)]
    failed = ax.collections[1].get_offsets()
    assert [p[0] for p in failed] == [1]
    import base64
    assert base64.b64decode(widget.outputs[0]["data"]["image/png"]).startswith(PNG)


def test_tune_progress_redraws_are_spaced():
    pytest.importorskip("ipywidgets")
    plot = TuneProgressPlot(min_interval=3600)
    widget = plot.widget
    first = widget.outputs
    for t in _trials():
        plot(t)
    assert widget.outputs == first                                # no redraw within the interval
    assert len(plot.trials) == 6
    plot.refresh()
    assert widget.outputs[0]["data"]["text/plain"] == "<autotune progress: 6 trials>"


def test_tune_progress_without_a_widget_records_only():
    plot = TuneProgressPlot(min_interval=0)
    for t in _trials():
        plot(t)
    assert plot._widget is None and len(plot.trials) == 6
    assert plot.figure().axes[0].get_ylabel().startswith("cost (µs)")


def test_tune_progress_marks_the_default_schedule():
    plot = TuneProgressPlot("model", min_interval=0)
    for t in _trials():
        plot(dataclasses.replace(t, default=t.index == 0))
    assert plot.default_cost == 9.0
    ax = plot.figure().axes[0]
    assert any(line.get_label().startswith("default schedule (9 µs)") for line in ax.lines)


def test_plots_read_on_light_and_dark_themes():
    """A PNG cannot follow JupyterLab's theme: transparent background (the page shows through)
    and text, ticks and spines in one grey that reads on white and on near-black."""
    import io

    import matplotlib.colors
    import matplotlib.image

    from deplokit.notebook.plots import INK
    plot = TuneProgressPlot("model", min_interval=0)
    for t in _trials():
        plot(t)
    for fig in (plot.figure(), bench_bars(_reports()), roofline(_reports())):
        pixels = matplotlib.image.imread(io.BytesIO(figure_png(fig)), format="png")
        assert pixels.shape[2] == 4 and pixels[0, 0, 3] == 0.0          # RGBA, the corner transparent
        ax = fig.axes[0]
        ink = matplotlib.colors.to_rgba(INK)
        assert matplotlib.colors.to_rgba(ax.title.get_color()) == ink
        assert matplotlib.colors.to_rgba(ax.xaxis.label.get_color()) == ink
        assert all(matplotlib.colors.to_rgba(s.get_edgecolor()) == ink for s in ax.spines.values())
        assert ax.get_legend().get_frame().get_alpha() == 0


def test_tune_progress_labels_a_narrow_log_axis():
    """Costs within one decade (5.2 .. 9 µs) hold no major tick of a log axis: the minor
    ticks carry the labels, so the axis is never bare."""
    plot = TuneProgressPlot("model", min_interval=0)
    best = 9.0
    for i, cost in enumerate([9.0, 7.5, 8.0, 5.5, 6.0, 5.2, 7.0]):     # TEST DATA, not measurements
        best = min(best, cost)
        plot(Trial(i, (("knob", i),), cost, best, True, ""))
    fig = plot.figure()
    figure_png(fig)                                                 # draws: tick labels are made
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    labels = [t.get_text() for t in ax.yaxis.get_minorticklabels() if lo <= t.get_position()[1] <= hi]
    assert hi < 10 * lo and any(labels)
