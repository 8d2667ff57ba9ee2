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


def highlight_spans(text: str, stage: str) -> str:
    """The text as escaped HTML with one styled <span> per token run (no <pre>)."""
    try:
        from pygments import lex

        from .lexers import lexer_for
    except ImportError:
        return esc(text)
    out: list[str] = []
    run_style, run_text = None, []
    for ttype, value in lex(text, lexer_for(stage)):
        style = _style_for(ttype)
        if style != run_style and run_text:
            out.append(_span(run_style, "".join(run_text)))
            run_text = []
        run_style = style
        run_text.append(value)
    if run_text:
        out.append(_span(run_style, "".join(run_text)))
    return "".join(out)


def _span(style: str | None, value: str) -> str:
    return f'<span style="{style}">{esc(value)}</span>' if style else esc(value)


def highlight_html(text: str, stage: str, extra_style: str = "") -> str:
    """A <pre> of `text` highlighted as the IR of `stage` (torch ... cuda)."""
    return f'<pre style="{PRE}{extra_style}">{highlight_spans(text, stage)}</pre>'
