"""IR text -> highlighted HTML: pygments with the IR lexers, inline styles, inside a <pre>.

The <pre> holds the whole text, so the output reads as the IR even where no style applies;
without pygments the same <pre> comes back unhighlighted."""
from __future__ import annotations

from .style import PRE, TOKEN_STYLES, esc


def _style_for(ttype) -> str:
    names = []
    while ttype is not None and len(ttype):
        names.append(".".join(ttype))
        ttype = ttype.parent
    for name in names:
        for prefix, style in TOKEN_STYLES:
            if name == prefix:
                return style
    return ""


def highlight_runs(text: str, stage: str) -> list[tuple[str, str]]:
    """(inline style, text) runs covering `text` in order; style '' where none applies."""
    try:
        from pygments import lex

        from .lexers import lexer_for
    except ImportError:
        return [("", text)]
    out: list[tuple[str, str]] = []
    for ttype, value in lex(text, lexer_for(stage)):
        style = _style_for(ttype)
        if out and out[-1][0] == style:
            out[-1] = (style, out[-1][1] + value)
        else:
            out.append((style, value))
    # pygments ends its text with a newline the input may not have had
    if out and not text.endswith("\n") and out[-1][1].endswith("\n"):
        out[-1] = (out[-1][0], out[-1][1][:-1])
        if not out[-1][1]:
            out.pop()
    return out


def highlight_spans(text: str, stage: str) -> str:
    """The text as escaped HTML with one styled <span> per token run (no <pre>)."""
    return "".join(_span(style, value) for style, value in highlight_runs(text, stage))


def _span(style: str | None, value: str) -> str:
    return f'<span style="{style}">{esc(value)}</span>' if style else esc(value)


def highlight_html(text: str, stage: str, extra_style: str = "") -> str:
    """A <pre> of `text` highlighted as the IR of `stage` (torch ... cuda)."""
    return f'<pre style="{PRE}{extra_style}">{highlight_spans(text, stage)}</pre>'
