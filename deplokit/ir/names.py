"""Fresh names: the one rule every pass uses to name what it adds (a loop variable, a
shared-memory stage, a temporary) without clashing with what is already there."""
from __future__ import annotations

from typing import Container


def fresh_name(base: str, taken: Container[str], sep: str = "", numbered: bool = False) -> str:
    """`base` when it is free (unless `numbered`), else the first free `base{sep}N`, N = 1, 2, ...
    (N = 0, 1, ... with `numbered`: `a0`, `a1`, ... for loop variables)."""
    if not numbered and base not in taken:
        return base
    n = 0 if numbered else 1
    while f"{base}{sep}{n}" in taken:
        n += 1
    return f"{base}{sep}{n}"
