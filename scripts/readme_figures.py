"""Regenerate the README figures that deplokit itself can compute, so README cannot drift.

    python scripts/readme_figures.py            # rewrite every marked figure in README.md
    python scripts/readme_figures.py --check    # exit 1 and name each figure that differs
    python scripts/readme_figures.py --only rmsnorm-knob-space [--check]

A figure is marked in README.md as `<!-- figure:NAME -->TEXT<!-- /figure -->` (inline or
around a whole fenced block; the markers do not render). FIGURES maps each NAME to the
function that computes TEXT and whether it is cheap (seconds: tests/test_readme.py checks
those on every run) or a whole model (about 10 s of CPU each: marked slow there).
Timings are not figures here: they depend on the machine (benchmarks/ prints them).
"""
from __future__ import annotations

import argparse
import re
import sys
from functools import lru_cache
from pathlib import Path

import torch

from deplokit import compile as dk_compile
from deplokit import compile_model
from deplokit.analysis.inventory import format_inventory
from deplokit.frontend.models import build
from deplokit.tune.space import kernel_spaces

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKED = re.compile(r"<!-- figure:(?P<name>[a-z0-9-]+) -->(?P<text>.*?)<!-- /figure -->", re.S)
QWEN, TINYLLAMA = "Qwen/Qwen2.5-7B", "TinyLlama/TinyLlama-1.1B-Chat-v1.0"


def rmsnorm_knob_space() -> str:
    torch.manual_seed(0)
    c = dk_compile(torch.nn.RMSNorm(2048), torch.randn(1, 32, 2048))
    (space,) = kernel_spaces(c.loop_ir, c.target)
    return f"RMSNorm's {space.raw_combinations():,} raw knob combinations are {space.size()} distinct schedules"


@lru_cache(maxsize=None)
def _model(name: str, seq: int = 128):
    """(program, compilation) of a built-in preset, weights on meta, as `deplokit compile NAME` does."""
    program = build(name, seq=seq)
    return program, compile_model(program)


def qwen_inventory() -> str:
    """The Qwen2.5-7B inventory as README shows it: the first three rows, the last, the total."""
    program, c = _model(QWEN)
    lines = format_inventory(c.inventory()).splitlines()
    rows, total = lines[1:-1], lines[-1]
    shown = [lines[0], *rows[:3], "...", rows[-1], total]
    return "\n```\n" + f"# {program.source}: kernel inventory\n" + "\n".join(shown) + "\n```\n"


def launches(name: str) -> str:
    _, c = _model(name)
    unique = len(c.inventory())
    return f"{len(c.torch_ir.ops)} torch ops → {len(c.launches)} launches of {unique} unique kernels"


FIGURES = {   # name -> (cheap, compute)
    "rmsnorm-knob-space": (True, rmsnorm_knob_space),
    "qwen-inventory": (False, qwen_inventory),
    "qwen-launches": (False, lambda: launches(QWEN)),
    "tinyllama-launches": (False, lambda: launches(TINYLLAMA)),
}


def marked(text: str) -> dict[str, str]:
    """NAME -> the text README holds between the markers of that figure."""
    return {m["name"]: m["text"] for m in MARKED.finditer(text)}


def regenerate(text: str, names) -> str:
    values = {name: FIGURES[name][1]() for name in names}
    return MARKED.sub(lambda m: (f"<!-- figure:{m['name']} -->{values[m['name']]}<!-- /figure -->"
                                 if m["name"] in values else m[0]), text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a figure differs")
    parser.add_argument("--only", action="append", choices=sorted(FIGURES), help="this figure only (repeatable)")
    args = parser.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    present = marked(text)
    names = args.only or sorted(present)
    unknown = sorted(set(present) - set(FIGURES))
    if unknown:
        print(f"README.md marks unknown figures: {', '.join(unknown)}", file=sys.stderr)
        return 1
    new = regenerate(text, names)
    changed = [n for n in names if marked(new).get(n) != present.get(n)]
    if args.check:
        for n in changed:
            print(f"README.md figure {n} is out of date: run python scripts/readme_figures.py --only {n}")
        return 1 if changed else 0
    if new != text:
        README.write_text(new, encoding="utf-8")
    print(f"README.md: {len(changed)} of {len(names)} figures changed" + (f" ({', '.join(changed)})" if changed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
