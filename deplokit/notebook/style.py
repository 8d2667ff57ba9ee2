"""The look of every rendering: inline styles built on JupyterLab's `--jp-*` CSS variables.

Inline styles only (no classes, no <style> blocks, no JS), so an output looks the same in
JupyterLab's light and dark themes, in a saved notebook and in nbviewer: each colour
names the theme's variable first and a fallback that reads on white and on near-black."""
from __future__ import annotations

import html


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def breakable(name) -> str:
    """A long snake_case name (a kernel's) escaped, with a line-break opportunity after each
    underscore: its column may wrap instead of pushing the table past the notebook's width.
    Copying it gives the name unchanged (<wbr> is not a character)."""
    return esc(name).replace("_", "_<wbr>")


FG = "var(--jp-content-font-color1, #24292f)"
FG_DIM = "var(--jp-content-font-color2, #57606a)"
BORDER = "var(--jp-border-color2, #d0d7de)"
PANEL = "var(--jp-layout-color2, rgba(127, 127, 127, 0.08))"
MONO = "var(--jp-code-font-family, SFMono-Regular, Menlo, Consolas, monospace)"
UI_FONT = "var(--jp-ui-font-family, system-ui, sans-serif)"
OK = "var(--jp-success-color1, #1a7f37)"
BAD = "var(--jp-error-color1, #cf222e)"
WARN = "var(--jp-warn-color1, #9a6700)"

# Diff lines: translucent backgrounds read on both a white and a dark page.
ADDED_BG = "rgba(46, 160, 67, 0.20)"
REMOVED_BG = "rgba(248, 81, 73, 0.20)"
ADDED_WORD_BG = "rgba(46, 160, 67, 0.45)"      # the changed words of a changed line
REMOVED_WORD_BG = "rgba(248, 81, 73, 0.45)"

BOX = f"font-family: {UI_FONT}; color: {FG}; max-width: 100%;"
PRE = (f"margin: 0; padding: 6px 8px; font-family: {MONO}; font-size: var(--jp-code-font-size, 13px); "
       f"line-height: 1.35; color: {FG}; background: transparent; border-left: 3px solid {BORDER}; "
       "white-space: pre; overflow-x: auto;")     # no height limit: JupyterLab's output area scrolls
TITLE = f"font-weight: 600; margin: 2px 0 4px 0; color: {FG};"
NOTE = f"color: {FG_DIM}; font-size: 0.9em; margin: 4px 0;"
TABLE = f"border-collapse: collapse; margin: 4px 0; font-size: 0.92em; color: {FG};"
TH = f"text-align: left; padding: 2px 10px 2px 0; border-bottom: 1px solid {BORDER}; font-weight: 600;"
TD = "text-align: left; padding: 2px 10px 2px 0; vertical-align: top;"
SUMMARY = "cursor: pointer; font-weight: 600; margin: 4px 0;"
CODE = f"font-family: {MONO}; font-size: 0.95em;"

# Pygments token type (by name, most specific first) -> inline style. JupyterLab's editor
# variables make the IR look like code in the user's theme.
TOKEN_STYLES = (
    ("Generic.Heading", "color: var(--jp-mirror-editor-def-color, #0550ae); font-weight: bold"),
    ("Comment", "color: var(--jp-mirror-editor-comment-color, #6e7781); font-style: italic"),
    ("Keyword.Type", "color: var(--jp-mirror-editor-builtin-color, #8250df)"),
    ("Keyword.Constant", "color: var(--jp-mirror-editor-atom-color, #0a7ea4)"),
    ("Keyword", "color: var(--jp-mirror-editor-keyword-color, #1a7f37); font-weight: bold"),
    ("Name.Function", "color: var(--jp-mirror-editor-def-color, #0550ae)"),
    ("Name.Attribute", "color: var(--jp-mirror-editor-attribute-color, #953800)"),
    ("Name.Variable", "color: var(--jp-mirror-editor-variable-2-color, #0969da)"),
    ("Name.Builtin", "color: var(--jp-mirror-editor-builtin-color, #8250df)"),
    ("Name.Label", "color: var(--jp-mirror-editor-meta-color, #8250df)"),
    ("Comment.Preproc", "color: var(--jp-mirror-editor-meta-color, #8250df)"),
    ("Number", "color: var(--jp-mirror-editor-number-color, #0a7ea4)"),
    ("Literal.String", "color: var(--jp-mirror-editor-string-color, #0a3069)"),
    ("Operator", "color: var(--jp-mirror-editor-operator-color, #8250df)"),
)

# Fill colours for the kernels of a dataflow graph: light pastels under black text, which
# read on either theme because the node carries its own background.
KERNEL_FILLS = ("#a6cee3", "#b2df8a", "#fdbf6f", "#cab2d6", "#fb9a99", "#ffff99", "#8dd3c7", "#bebada",
                "#80b1d3", "#fccde5", "#d9d9d9", "#ccebc5", "#ffed6f", "#e5d8bd", "#b3de69", "#fddaec")
UNFUSED_FILL = "#f0f0f0"


def kernel_fill(index: int) -> str:
    return KERNEL_FILLS[index % len(KERNEL_FILLS)]


def box(inner: str) -> str:
    return f'<div style="{BOX}">{inner}</div>'


def title(text: str) -> str:
    return f'<div style="{TITLE}">{text}</div>'


def note(text: str) -> str:
    return f'<div style="{NOTE}">{text}</div>'


def details(summary: str, inner: str, open_: bool = False) -> str:
    """Collapsible without JS: the browser's own <details>."""
    flag = " open" if open_ else ""
    return f'<details{flag} style="margin: 2px 0;"><summary style="{SUMMARY}">{summary}</summary>{inner}</details>'


def table(header: list[str], rows: list[list[str]]) -> str:
    """Cells are HTML already (escape text before)."""
    head = "".join(f'<th style="{TH}">{h}</th>' for h in header)
    body = "".join("<tr>" + "".join(f'<td style="{TD}">{c}</td>' for c in row) + "</tr>" for row in rows)
    return f'<table style="{TABLE}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


# A wide table scrolls sideways in its own box. JupyterLab's output row is a flex row that
# hides what overflows it: without `contain: inline-size` the table's own width would widen
# the output past the notebook and its right-hand columns would be cut off, not scrollable.
# Only for an output's top level: inside a shrink-to-fit box (a widget row) it would
# collapse to nothing.
SCROLL_X = "overflow-x: auto; contain: inline-size; max-width: 100%;"


def scroll_x(inner: str) -> str:
    return f'<div style="{SCROLL_X}">{inner}</div>'


def mark(ok: bool) -> str:
    return f'<span style="color: {OK}; font-weight: bold">✓</span>' if ok else \
        f'<span style="color: {BAD}; font-weight: bold">✗</span>'
