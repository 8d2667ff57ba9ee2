"""The renderers deplokit.display calls: one per displayable type, registered on import.

Each returns {"text/plain": canonical text, "text/html": ...}; the HTML is a pure function
of the object (no ids, no clock), so re-running a notebook reproduces it byte for byte."""
from __future__ import annotations

from .. import display
from ..analysis.access import WarpAccess
from ..analysis.inventory import Inventory, si, total_line
from ..compilation import CheckResult, Compilation, PassCheck
from ..ir.kernel_ir import KernelFunc, KernelProgram
from ..ir.loop_ir import Kernel, LoopProgram
from ..ir.tensor_ir import TensorProgram
from ..ir.tile_ir import TileKernel, TileProgram
from ..ir.torch_ir import TorchProgram
from ..ir.types import format_shape
from ..passes.lower.cuda import CudaSource
from ..pipeline import TraceStep
from ..tune.roofline import Roofline
from ..tune.timeline import Timeline
from .access_view import render_access
from .check_view import check_html, count
from .diff import STAGE_TITLES, step_html
from .graph import graph_html
from .highlight import highlight_html
from .overview import overview_html
from .style import BAD, OK, box, breakable, esc, kernel_fill, note, scroll_x, table, title


def _bundle(obj, html: str) -> dict:
    return {"text/plain": str(obj), "text/html": html}


def code_html(obj, stage: str, subtitle: str = "") -> str:
    """A highlighted IR text under its stage title."""
    head = STAGE_TITLES[stage] + (f" · {esc(subtitle)}" if subtitle else "")
    return box(title(head) + highlight_html(str(obj), stage))


def render_torch(p: TorchProgram) -> dict:
    return _bundle(p, graph_html(p, "torch"))


def render_tensor(p: TensorProgram) -> dict:
    return _bundle(p, graph_html(p, "tensor"))


def render_loop(p: LoopProgram) -> dict:
    return _bundle(p, code_html(p, "loop", count(len(p.kernels), "kernel")))


def render_loop_kernel(k: Kernel) -> dict:
    return _bundle(k, code_html(k, "loop", k.name))


def render_tile(p: TileProgram) -> dict:
    return _bundle(p, code_html(p, "tile", count(len(p.kernels), "kernel")))


def render_tile_kernel(k: TileKernel) -> dict:
    return _bundle(k, code_html(k, "tile", k.name))


def render_kernel_program(p: KernelProgram) -> dict:
    return _bundle(p, code_html(p, "kernel", count(len(p.kernels), "kernel")))


def render_kernel_func(k: KernelFunc) -> dict:
    return _bundle(k, code_html(k, "kernel", f"{k.name} grid={k.grid} block={k.block}"))


def render_cuda(c: CudaSource) -> dict:
    return _bundle(c, code_html(c, "cuda", f"{c.target} · {count(len(c.kernels), 'kernel')}"))


def render_step(step: TraceStep) -> dict:
    return _bundle(step, step_html(step))


def render_check(result: CheckResult) -> dict:
    return _bundle(result, box(check_html(result)))


def render_pass_check(p: PassCheck) -> dict:
    color = OK if p.result.ok else BAD
    mark = "✓" if p.result.ok else "✗"
    skipped = " (skipped: the IR is the previous pass's)" if p.skipped else ""
    html = (f'<span style="font-family: var(--jp-code-font-family, monospace)">t:{esc(p.name)}</span> '
            f'<span style="color: {color}; font-weight: bold">{mark}</span> '
            f"max error {p.result.max_abs_error:.3g}{esc(skipped)}")
    return _bundle(p, box(html))


def render_roofline(r: Roofline) -> dict:
    rows = []
    for p in r.points:
        side = "memory" if p.intensity < r.ridge else "compute"
        rows.append([f"<code>{esc(p.name)}</code>", f"{p.flops:,.0f}", f"{p.bytes:,}", f"{p.intensity:.2f}",
                     f"{p.roof_us:.3g}", f"{p.predicted_us:.3g}", "—" if not p.measured_us else f"{p.measured_us:.3g}",
                     f"{side}-bound; model: {esc(p.bound)}"])
    head = title(f"roofline{' of ' + esc(r.label) if r.label else ''} · {esc(r.target)} ({esc(r.gpu)}): "
                 f"{r.peak_bandwidth_gbs:g} GB/s, "
                 f"{r.peak_gflops / 1e3:g} TFLOP/s FP32, ridge at {r.ridge:.1f} FLOP/byte")
    html = head + scroll_x(table(["kernel", "FLOPs", "bytes", "FLOP/byte", "ceiling µs", "model µs", "measured µs", ""],
                                 rows))
    if not r.measured_on:
        html += note("no measured points: timings need a GPU (<code>deplokit bench</code>)")
    return _bundle(r, box(html))


def render_inventory(inv: Inventory) -> dict:
    """The inventory as a table that never wraps a row: a reducer's row names the kernel it follows."""
    rows = []
    for e in inv:
        of = (f'<br><span style="font-size: 0.85em; opacity: 0.7">split-K reducer, after each '
              f"<code>{breakable(e.of)}</code></span>") if e.of else ""
        name = f"<code>{breakable(e.kernel)}</code>" + of
        rows.append([name, esc(e.computes) or "—", f"{e.launches}", _shapes(e), _nowrap(si(e.bytes, "B")),
                     _nowrap(si(e.flops, ""))])
    head = ["kernel", "computes", "launches", "shapes (inputs → outputs)", "bytes / launch", "FLOPs / launch"]
    html = (title("kernel inventory: each unique kernel and how often it is launched")
            + scroll_x(table(head, rows)))
    return _bundle(inv, box(html + note(esc(total_line(inv.entries)))))


def _nowrap(text: str) -> str:
    return f'<span style="white-space: nowrap">{esc(text)}</span>'


def _shapes(e) -> str:
    """Each shape whole on a line; a long list wraps between shapes, so the table fits a notebook's width."""
    def shapes(group):
        return ", ".join(_nowrap(format_shape(s)) for s in group)
    return f"{shapes(e.inputs)} {_nowrap('→ ' + ', '.join(format_shape(s) for s in e.outputs))}"


def render_timeline(t: Timeline) -> dict:
    """A strip of the launches in order, each as wide as the model's time (colour: the unique
    kernel it runs), above the table."""
    total = t.model_us or 1.0
    colours = {k: kernel_fill(i) for i, k in enumerate(dict.fromkeys(r.kernel for r in t.rows))}
    strip = "".join(f'<div title="{esc(r.launch)}: {r.model_us:.2f} µs" '
                    f'style="flex: 0 0 {100 * r.model_us / total:.3f}%; height: 18px; background: {colours[r.kernel]}; '
                    'border-right: 1px solid rgba(0,0,0,0.25)"></div>'
                    for r in t.rows)
    # the kernel a launch runs under its name, where it is another's (an identical layer's, a reducer)
    rows = [[str(i), esc(r.computes) or "—", f"<code>{breakable(r.launch)}</code>" + (
                "" if r.kernel == r.launch else
                f'<br><span style="font-size: 0.85em; opacity: 0.7">runs <code>{breakable(r.kernel)}</code></span>'),
             f"{r.start_us:.2f}", f"{r.model_us:.2f}", _nowrap(si(r.bytes, "B")), _nowrap(si(r.flops, "")),
             "—" if r.measured_us is None else f"{r.measured_us:.2f}"] for i, r in enumerate(t.rows)]
    html = (title(f"timeline of {esc(t.label)} on {esc(t.target)}: {len(t.rows)} launches, {t.model_us:.2f} µs "
                  "by the cost model") +
            f'<div style="display: flex; width: 100%; margin: 4px 0 8px 0">{strip}</div>' +
            scroll_x(table(["#", "computes", "launch", "start µs", "model µs", "bytes", "FLOPs", "measured µs"],
                           rows)) +
            note("predicted by the cost model, one launch after another; measured times need a GPU "
                 "(<code>c.bench(profile=True)</code>, then <code>c.timeline(report=...)</code>)"))
    return _bundle(t, box(html))


def render_compilation(c: Compilation) -> dict:
    return _bundle(c, overview_html(c))


RENDERERS = {
    TorchProgram: render_torch, TensorProgram: render_tensor, LoopProgram: render_loop, Kernel: render_loop_kernel,
    TileProgram: render_tile, TileKernel: render_tile_kernel, KernelProgram: render_kernel_program,
    KernelFunc: render_kernel_func, CudaSource: render_cuda, TraceStep: render_step, CheckResult: render_check,
    PassCheck: render_pass_check, Compilation: render_compilation, WarpAccess: render_access, Roofline: render_roofline,
    Inventory: render_inventory, Timeline: render_timeline,
}


def register_all() -> None:
    for cls, fn in RENDERERS.items():
        display.register(cls, fn)
