"""The machine code view in a notebook: per kernel, its hottest loop's instruction mix as a
table and the SASS listing with that loop highlighted (the code outside it collapsed)."""
from __future__ import annotations

from .. import display
from ..analysis.sass import KernelSass, SassReport
from .style import ADDED_BG, CODE, PRE, box, details, esc, note, table, title

HOT_BG = ADDED_BG           # the translucent green of an added diff line: reads on both themes


def mix_rows(k: KernelSass) -> list[list[str]]:
    """[what, count, per FFMA or share] of the hottest loop: what the issue slots go to."""
    m = k.hottest.mix
    ffma = m.ffma or 0

    def per(n):
        return f"{n / ffma:.2f} per FFMA" if ffma else ""
    rows = [("instructions", m.instructions, ""), ("FFMA", m.ffma, f"{m.ffma_share:.0%} of the instructions"),
            ("other floating-point", m.float_ops - m.ffma, ""),
            ("LDS (32-bit)", m.lds, per(m.lds)), ("LDS.64", m.lds64, per(m.lds64)),
            ("LDS.128", m.lds128, per(m.lds128)), ("shared loads in all", m.shared_loads, per(m.shared_loads)),
            ("global loads / stores", f"{m.ldg} / {m.stg}", ""),
            ("bulk copies (UBLKCP) / TMA (UTMALDG)", f"{m.bulk} / {m.tma}", ""), ("cp.async (LDGSTS)", m.ldgsts, ""),
            ("barriers (BAR) / mbarrier waits", f"{m.bar} / {m.mbarrier_waits}", ""),
            ("local loads / stores (spills)", m.local, "")]
    return [[esc(a), f'<span style="{CODE}">{esc(b)}</span>', esc(c)] for a, b, c in rows]


def _pre(lines: list[str], hot: bool) -> str:
    style = PRE + (f" background: {HOT_BG};" if hot else "")
    return f'<pre style="{style}">' + "\n".join(esc(x) for x in lines) + "</pre>"


def listing_html(k: KernelSass) -> str:
    """The listing in runs: the hottest loop's lines open and highlighted, other runs collapsed."""
    lines = k.listing()
    hot = set(k.hottest.addresses) if k.hottest else set()
    runs: list[tuple[bool, list[str]]] = []
    for ins, line in zip(k.instructions, lines):
        inside = ins.address in hot
        if runs and runs[-1][0] == inside:
            runs[-1][1].append(line)
        else:
            runs.append((inside, [line]))
    parts = []
    for inside, chunk in runs:
        if inside:
            parts.append(_pre(chunk, True))
        else:
            parts.append(details(esc(f"{len(chunk)} instructions outside the hottest loop"), _pre(chunk, False)))
    return "".join(parts)


def kernel_html(k: KernelSass) -> str:
    head = title(esc(k.header_line().removeprefix("// kernel ")))
    if k.hottest is None:
        return head + note("no loop: straight-line code") + details("SASS", _pre(k.listing(), False))
    hot = k.hottest
    where = note(esc(f"hottest loop {hot.name}: 0x{hot.start:04x}..0x{hot.end:04x}, nesting depth {hot.depth} "
                     "(the deepest loop doing floating-point work; counts are static, each instruction once)"))
    return head + where + table(["hottest loop", "count", ""], mix_rows(k)) + listing_html(k)


def render_sass(report: SassReport) -> dict:
    html = box(title(esc(f"SASS · {report.arch} · {report.tool} · {len(report.kernels)} kernels"))
               + "".join(kernel_html(k) for k in report.kernels))
    return {"text/plain": report.summary(), "text/html": html}


def register() -> None:
    display.register(SassReport, render_sass)
