"""A line diff that reads the way a person compares two IR texts.

A plain unified diff sees a re-indented line as removed and added: pass 001, which wraps
the whole body in a Tile and so indents every line by one level, would show the kernel
once in red and once in green. Here lines are matched ignoring their indentation; a line
whose text stayed and whose indentation moved is an `indent` row, shown once. A removed
line paired with a similar added line (a knob value changed, an index rewritten) carries
`marks`: the character ranges of the words that differ, so the eye goes to them.

Pure text in, rows out: the HTML (diff.py) and the plain-text stepper both draw these."""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

# How alike a removed and an added line must be (difflib ratio) to be shown as one edit.
PAIR_RATIO = 0.5
_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")


@dataclass(frozen=True)
class DiffRow:
    kind: str                               # context | indent | add | remove | gap
    text: str
    marks: tuple[tuple[int, int], ...] = ()  # changed character ranges [start, end) of text


def _word_marks(old: str, new: str) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    """The ranges of `old` and of `new` whose words differ, token by token."""
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    pos_a = [0]
    for t in a:
        pos_a.append(pos_a[-1] + len(t))
    pos_b = [0]
    for t in b:
        pos_b.append(pos_b[-1] + len(t))
    marks_a, marks_b = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if i2 > i1:
            marks_a.append((pos_a[i1], pos_a[i2]))
        if j2 > j1:
            marks_b.append((pos_b[j1], pos_b[j2]))
    return tuple(marks_a), tuple(marks_b)


def _replace_rows(old: list[str], new: list[str]) -> list[DiffRow]:
    """A block of removed lines and the added lines that replace it: removes first, then adds
    (as a unified diff orders them); lines paired in order carry word marks when alike."""
    removes = [DiffRow("remove", line) for line in old]
    adds = [DiffRow("add", line) for line in new]
    for k in range(min(len(old), len(new))):
        a, b = old[k].strip(), new[k].strip()
        if difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() >= PAIR_RATIO:
            ma, mb = _word_marks(old[k], new[k])
            removes[k] = DiffRow("remove", old[k], ma)
            adds[k] = DiffRow("add", new[k], mb)
    return removes + adds


def line_diff(before: str, after: str, context: int = 3) -> tuple[DiffRow, ...]:
    """Rows of the change from `before` to `after`, unchanged runs cut to `context` lines
    around each change (a `gap` row says how many were left out); () when nothing changed."""
    a, b = before.splitlines(), after.splitlines()
    matcher = difflib.SequenceMatcher(None, [x.strip() for x in a], [x.strip() for x in b], autojunk=False)
    rows: list[DiffRow] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows += [
                DiffRow("context" if a[i] == b[j] else "indent", b[j]) for i, j in zip(range(i1, i2), range(j1, j2))
            ]
        elif tag == "delete":
            rows += [DiffRow("remove", line) for line in a[i1:i2]]
        elif tag == "insert":
            rows += [DiffRow("add", line) for line in b[j1:j2]]
        else:
            rows += _replace_rows(a[i1:i2], b[j1:j2])
    changed = [i for i, r in enumerate(rows) if r.kind != "context"]
    if not changed:
        return ()
    keep = set()
    for i in changed:
        keep.update(range(max(0, i - context), min(len(rows), i + context + 1)))
    out: list[DiffRow] = []
    i = 0
    while i < len(rows):
        if i in keep:
            out.append(rows[i])
            i += 1
            continue
        j = i
        while j < len(rows) and j not in keep:
            j += 1
        out.append(DiffRow("gap", f"{j - i} unchanged line{'' if j - i == 1 else 's'}"))
        i = j
    return tuple(out)


_SIGN = {"add": "+", "remove": "-", "context": " ", "indent": "~"}


def diff_text(rows) -> str:
    """The rows as plain text: `+` added, `-` removed, `~` only re-indented, `⋯` a gap."""
    return "\n".join(f"⋯ {r.text}" if r.kind == "gap" else f"{_SIGN[r.kind]}{r.text}" for r in rows)
