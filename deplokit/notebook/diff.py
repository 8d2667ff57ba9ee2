"""Pass diffs as HTML: added lines green, removed red, context dim; the pass on top.

Lines are matched ignoring indentation (linediff.py): a line a pass only re-indented shows
once, marked `~` and undimmed, and in a changed line the words that changed carry a
stronger background than the rest of it. The CLI's -vv prints the unified diff of the
same two texts."""
from __future__ import annotations

from .highlight import highlight_runs
from .linediff import DiffRow, line_diff
from .style import ADDED_BG, ADDED_WORD_BG, FG_DIM, NOTE, PRE, REMOVED_BG, REMOVED_WORD_BG, box, esc, note, title

STAGE_TITLES = {"torch": "Torch IR", "tensor": "Tensor IR", "loop": "Loop IR", "tile": "Tile IR",
                "kernel": "Kernel IR", "cuda": "CUDA"}

_ROW_STYLE = {
    "add": f"background: {ADDED_BG};",
    "remove": f"background: {REMOVED_BG};",
    "context": "opacity: 0.6;",
    "indent": "",
    "gap": f"color: {FG_DIM}; font-style: italic;",
}
_SIGN = {"add": "+", "remove": "-", "context": " ", "indent": "~", "gap": "⋯ "}
_WORD_BG = {"add": ADDED_WORD_BG, "remove": REMOVED_WORD_BG}


def _marked_line(row: DiffRow, stage: str) -> str:
    """The row's text highlighted as IR, its marked ranges on a stronger background."""
    if row.kind == "gap":
        return esc(row.text)
    out, pos = [], 0
    for style, value in highlight_runs(row.text, stage):
        cuts = sorted({0, len(value)} | {min(max(m - pos, 0), len(value)) for r in row.marks for m in r})
        for lo, hi in zip(cuts, cuts[1:]):
            piece = esc(value[lo:hi])
            piece = f'<span style="{style}">{piece}</span>' if style else piece
            if any(a <= pos + lo and pos + hi <= b for a, b in row.marks):
                piece = f'<span style="background: {_WORD_BG[row.kind]}; border-radius: 2px;">{piece}</span>'
            out.append(piece)
        pos += len(value)
    return "".join(out)


def diff_html(before: str, after: str, stage: str) -> str:
    """A <pre> of the diff, the lines highlighted as the IR of `stage`."""
    rows = line_diff(before, after)
    if not rows:
        return note("no change")
    lines = [f'<span style="display: block; {_ROW_STYLE[r.kind]}">{_SIGN[r.kind]}{_marked_line(r, stage)}</span>'
             for r in rows]
    # Block spans, one a line, so a background spans the whole width; they break the lines.
    legend = note("+ added, − removed, ~ re-indented only; the words a pass changed on a stronger colour") \
        if any(r.kind == "indent" or r.marks for r in rows) else ""
    return f'<pre style="{PRE}">{"".join(lines)}</pre>' + legend


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
