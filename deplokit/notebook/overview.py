"""A Compilation at a glance: its stages, kernels, knobs and simulator check, with every IR
and the trace collapsible below (<details>, no JS)."""
from __future__ import annotations

import weakref

from ..errors import DeplokitError
from ..ir.kernel_ir import declared_smem_bytes
from .check_view import check_html, count
from .diff import STAGE_TITLES, step_html
from .graph import graph_html
from .highlight import highlight_html
from .style import BAD, box, details, esc, note, table, title

# The simulator check is the one costly part of an overview: run once per Compilation.
_CHECKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

def simulator_check(c):
    """c.check(backend="sim"), once per Compilation; an error is kept as its message."""
    if c not in _CHECKS:
        try:
            _CHECKS[c] = c.check(backend="sim")
        except DeplokitError as e:
            _CHECKS[c] = f"{type(e).__name__}: {e}"
    return _CHECKS[c]


def _knobs(tile_kernel) -> str:
    return "<br>".join(f"<code>{esc(k)}</code>={esc(v)}" for k, v in tile_kernel.knobs) or "—"


def kernels_table(c) -> str:
    tiles = {k.name: k for k in c.tile_ir.kernels}
    rows = []
    for k in c.kernel_ir.kernels:
        regs = "—" if k.registers is None else f"{k.registers}" + (f" ({k.spills} B spilled)" if k.spills else "")
        tile = tiles.get(k.name)
        rows.append([f"<code>{esc(k.name)}</code>", esc(k.grid), esc(k.block), str(k.threads),
                     f"{declared_smem_bytes(k)} B", regs, _knobs(tile) if tile else "—"])
    return table(["kernel", "grid", "block", "threads", "static smem", "registers", "knobs"], rows)


def _check_line(c) -> str:
    result = simulator_check(c)
    if isinstance(result, str):
        return f'<div><span style="color: {BAD}; font-weight: bold">✗</span> simulator: {esc(result)}</div>'
    return f"<div>simulator check: {check_html(result)}</div>"


def _trace_html(c) -> str:
    rows, steps = [], []
    for step in c.trace:
        if step.name == "capture":
            continue
        status = "skipped" if not step.changed else "changed"
        knobs = "; ".join(f"{k}: " + ", ".join(f"{n}={v}" for n, v in kn) for k, kn in step.params if kn)
        reason = step.skipped_reason if step.skipped_reason else ""
        rows.append([f"<code>{esc(step.tag)}</code>", status, esc(knobs) or "—", esc(reason)])
        if step.changed:
            steps.append(details(f"<code>{esc(step.tag)}</code>", step_html(step)))
    return table(["step", "", "knobs", "why it changed nothing"], rows) + "".join(steps)


def overview_html(c) -> str:
    t = c.target
    counts = (f"{count(len(c.torch_ir.ops), 'torch op')} → {count(len(c.tensor_ir.nodes), 'tensor node')} → "
              f"{count(len(c.loop_ir.kernels), 'kernel')}")
    head = title(f"deplokit Compilation · {esc(t.name)} ({esc(t.reference_gpu)}) · {esc(counts)}")
    inputs = ", ".join(f"<code>{esc(n)}</code>" for n in c.input_names) or "none"
    parts = [head, note(f"inputs: {inputs}; outputs: "
                        + ", ".join(f"<code>{esc(o)}</code>" for o in c.torch_ir.outputs)),
             _check_line(c), kernels_table(c)]
    stages = [("torch", graph_html(c.torch_ir, "torch", c.tensor_ir, c.loop_ir)),
              ("tensor", graph_html(c.tensor_ir, "tensor", c.tensor_ir, c.loop_ir))]
    stages += [(s, highlight_html(str(c.ir(s)), s)) for s in ("loop", "tile", "kernel", "cuda")]
    parts.append(details("stages", "".join(details(STAGE_TITLES[s], html) for s, html in stages)))
    parts.append(details("trace", _trace_html(c)))
    passes = sum(1 for s in c.trace if s.stage == "tile" and s.changed)
    total = sum(1 for s in c.trace if s.stage == "tile")
    parts.append(note(f"{passes} of {total} Tile-IR passes changed the program; "
                      "<code>.stepper()</code> walks them one by one"))
    return box("".join(parts))
