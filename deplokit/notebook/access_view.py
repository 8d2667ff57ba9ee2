"""One warp's memory access drawn (deplokit.analysis.access): for a global access, the 32
lanes coloured by the 32-byte sector each falls in and the sectors with how much of each
is used; for a shared-memory load, the 32 banks with the words each serves, a bank that
serves several distinct words (a conflict: one wavefront each) in red."""
from __future__ import annotations

from ..analysis.access import WarpAccess, summary
from .style import BAD, BORDER, FG, FG_DIM, MONO, OK, box, esc, note, title

# Sector colours: light fills under black text, readable on light and dark pages.
SECTOR_FILLS = ("#a6cee3", "#b2df8a", "#fdbf6f", "#cab2d6", "#fb9a99", "#ffff99", "#8dd3c7", "#bebada")
CONFLICT_FILL = "#ff9e9e"
FREE_FILL = "#c7e9c0"
CELL = (f"display: inline-block; box-sizing: border-box; width: 23px; margin: 0 1px 1px 0; padding: 1px 0; "
        f"text-align: center; font-family: {MONO}; font-size: 8.5px; line-height: 1.25; "
        f"border: 1px solid {BORDER}; vertical-align: top; overflow: hidden;")
ROW = "white-space: nowrap;"
GRID = "overflow-x: auto;"      # the whole grid scrolls as one where the page is narrow


def _cell(top: str, bottom: str, fill: str, tip: str = "") -> str:
    """A filled cell carries its own light background, so black text; an empty one the page's."""
    tip = f' title="{esc(tip)}"' if tip else ""
    color = FG if fill == "transparent" else "#111"
    return f'<span style="{CELL} background: {fill}; color: {color};"{tip}>{top}<br>{bottom}</span>'


def _label(text: str) -> str:
    return (f'<span style="display: inline-block; width: 50px; color: {FG_DIM}; font-size: 0.8em; '
            f'white-space: nowrap; vertical-align: top;">{text}</span>')


def _global_html(w: WarpAccess) -> str:
    order = {s: i for i, s in enumerate(w.sectors)}
    lanes = []
    for i, lane in enumerate(w.addresses):
        if not lane:
            lanes.append(_cell(f"{i}", "—", "transparent"))
            continue
        fill = SECTOR_FILLS[order[w.sector_of(lane[0])] % len(SECTOR_FILLS)]
        shown = str(lane[0]) if len(lane) == 1 else f"{lane[0]}+{len(lane)}"
        lanes.append(_cell(f"{i}", esc(shown), fill, f"lane {i}: elements {', '.join(map(str, lane))}"))
    used: dict[int, set] = {}
    for lane in w.addresses:
        for a in lane:
            used.setdefault(w.sector_of(a), set()).add(a)
    sectors = []
    for s in w.sectors:
        pct = len(used[s]) * w.element_bytes * 100 // 32
        fill = SECTOR_FILLS[order[s] % len(SECTOR_FILLS)]
        sectors.append(_cell(f"s{s}", f"{pct}%", fill, f"sector {s}: bytes {s * 32}..{s * 32 + 31}, {pct}% used"))
    return (f'<div style="{ROW}">{_label("lane")}{"".join(lanes)}</div>'
            f'<div style="{ROW}">{_label("sectors")}{"".join(sectors)}</div>')


def _shared_html(w: WarpAccess) -> str:
    out = []
    for p, lanes in enumerate(w.phases):
        words = w.bank_words(lanes)
        depth = max((len(v) for v in words.values()), default=0)
        head = "".join(_cell(f"b{b}", "", "transparent") for b in range(32))
        rows = [f'<div style="{ROW}">{_label("bank")}{head}</div>']
        for r in range(depth):
            cells = []
            for b in range(32):
                served = list(words.get(b, {}).items())
                if r >= len(served):
                    cells.append(_cell("&nbsp;", "&nbsp;", "transparent"))
                    continue
                word, readers = served[r]
                fill = CONFLICT_FILL if len(served) > 1 else FREE_FILL
                who = f"L{readers[0]}" + ("+" if len(readers) > 1 else "")
                cells.append(_cell(f"w{word}", who, fill, f"bank {b}: word {word}, lanes {', '.join(map(str, readers))}"))
            rows.append(f'<div style="{ROW}">{_label(f"wave {r + 1}")}{"".join(cells)}</div>')
        if len(w.phases) > 1:
            d = w.phase_degree(lanes)
            rows.insert(0, note(f"lanes {lanes[0]}–{lanes[-1]} (phase {p + 1} of {len(w.phases)}): "
                                f"{d} wavefront{'' if d == 1 else 's'}"))
        out.append("".join(rows))
        if p == 0 and len(w.phases) > 1 and all(w.phase_degree(q) == w.phase_degree(lanes) for q in w.phases):
            out.append(note(f"the other {len(w.phases) - 1} phases look alike"))
            break
    return "".join(out)


def access_html(w: WarpAccess) -> str:
    a = w.access
    heading = title((f"{esc(w.label)}: " if w.label else "")
                    + f"{esc(a.kind)} of <code>{esc(a.tensor)}</code> · warp {w.warp} of block 0")
    stmt = f'<div style="font-family: {MONO}; font-size: 0.9em; margin: 2px 0 6px 0;">{esc(a.text.strip())}</div>'
    bad = (w.shared and w.degree > 1) or (not w.shared and w.efficiency < 0.999)
    verdict = f'<div style="color: {BAD if bad else OK}; font-weight: 600; margin-top: 4px;">{esc(summary(w))}</div>'
    body = f'<div style="{GRID}">{_shared_html(w) if w.shared else _global_html(w)}</div>'
    legend = note("each cell a bank: the word it serves and the first lane reading it (+: more lanes share "
                  "the word, a broadcast); red: a bank serving several words, one wavefront each") if w.shared \
        else note("each lane coloured by the 32-byte sector its address falls in; below, each sector with the "
                  "share of its bytes the warp uses")
    return box(heading + stmt + body + verdict + legend)


def render_access(w: WarpAccess) -> dict:
    return {"text/plain": str(w), "text/html": access_html(w)}
