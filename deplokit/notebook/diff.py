"""Pass diffs as HTML: added lines green, removed red, context dim; the pass on top.

The rows come from the same unified diff the CLI prints with -vv (difflib, 3 lines of
context), so what the notebook shows and what `deplokit compile -vv` prints agree."""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from .highlight import highlight_spans
from .style import ADDED_BG, FG_DIM, NOTE, PRE, REMOVED_BG, box, esc, note, title

STAGE_TITLES = {"torch": "Torch IR", "tensor": "Tensor IR", "loop": "Loop IR", "tile": "Tile IR",
                "kernel": "Kernel IR", "cuda": "CUDA"}


@dataclass(frozen=True)
class DiffRow:
    kind: str       # add | remove | context | hunk
    text: str


def diff_rows(before: str, after: str, context: int = 3) -> tuple[DiffRow, ...]:
    rows = []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=context):
        if line.startswith(("--- ", "+++ ")):
            continue
        if line.startswith("@@"):
            rows.append(DiffRow("hunk", line))
        elif line.startswith("+"):
            rows.append(DiffRow("add", line[1:]))
        elif line.startswith("-"):
            rows.append(DiffRow("remove", line[1:]))
        else:
            rows.append(DiffRow("context", line[1:]))
    return tuple(rows)


_ROW_STYLE = {
    "add": f"background: {ADDED_BG};",
    "remove": f"background: {REMOVED_BG};",
    "context": "opacity: 0.6;",
    "hunk": f"color: {FG_DIM}; font-style: italic;",
}
_SIGN = {"add": "+", "remove": "-", "context": " ", "hunk": ""}


def diff_html(before: str, after: str, stage: str) -> str:
    """A <pre> of the diff, the lines highlighted as the IR of `stage`."""
    rows = diff_rows(before, after)
    if not rows:
        return note("no change")
    lines = []
    for r in rows:
        body = esc(r.text) if r.kind == "hunk" else highlight_spans(r.text, stage)
        lines.append(f'<span style="display: block; {_ROW_STYLE[r.kind]}">{_SIGN[r.kind]}{body}</span>')
    # Block spans, one a line, so a background spans the whole width; they break the lines.
    return f'<pre style="{PRE}">{"".join(lines)}</pre>'


def knob_text(knobs) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs)


def step_header(step) -> str:
    """The pass name, its one-line description and its parameters (knobs per kernel)."""
    desc = step.description if step.stage == "tile" else ""
    head = f'<span style="font-family: var(--jp-code-font-family, monospace)">{esc(step.tag)}</span>'
    head += f" &nbsp;<span style=\"{NOTE}\">{esc(desc)}</span>" if desc else \
        f" &nbsp;<span style=\"{NOTE}\">→ {esc(STAGE_TITLES.get(step.stage, step.stage))}</span>"
    parts = [title(head)]
    for kernel, knobs in step.params:
        parts.append(note(f"{esc(kernel)}: {esc(knob_text(knobs)) or 'no knobs'}"))
    return "".join(parts)


def step_html(step) -> str:
    """One trace step: its header, then the coloured diff or why it changed nothing."""
    parts = [step_header(step)]
    before, after = _text(step.before), _text(step.after)
    if step.skipped_reason or before == after:
        parts.append(note("skipped: " + esc(step.skipped_reason or "no change")))
        return box("".join(parts))
    notes = step.remarks
    if notes:
        parts.append("".join(note(("not applied: " if step.stage == "tile" else "") + esc(n)) for n in notes))
    parts.append(diff_html(before, after, step.stage))
    return box("".join(parts))


def _text(ir) -> str:
    return "" if ir is None else str(ir)
