"""What a scheduling pass declares beside its code: its knobs, and how it says no.

A knob has a name, a finite domain and a default heuristic; the autotuner reads the
domains from here and nowhere else. A pass that does not apply to a kernel returns Skip
with the reason, which the trace records."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Knob:
    name: str
    domain: tuple
    default: Callable[..., Any]     # (kernel, target) -> a value in domain
    doc: str = ""


@dataclass(frozen=True)
class Skip:
    reason: str


def pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p
