"""python -m deplokit.fuzz: run the differential fuzzer, or replay one case."""
from __future__ import annotations

import argparse
import json
import sys

from .campaign import fuzz
from .programs import DTYPES, Case
from .runner import run_case
from .templates import covered_templates, uncovered_rules


def replay_dtype(text: str) -> str:
    """The dtype a replayed case ran at, from its text (the reproducer's inputs say it): a half
    case is checked against eager in half and the float32 run, not as a float32 one."""
    halves = [h for h in ("bfloat16", "float16") if f"dtype=torch.{h}" in text]
    if not halves:
        return "float32"
    first_input = next((ln for ln in text.splitlines() if "torch.randn(" in ln), "")
    mixed = len(halves) > 1 or (first_input and "dtype=torch." not in first_input)
    return "mixed" if mixed else halves[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m deplokit.fuzz", description=__doc__)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=100)
    p.add_argument("--start", type=int, default=0, help="first case index (resume a long run)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    p.add_argument("--budget", type=float, default=None, help="stop starting cases after this many seconds")
    p.add_argument("--nvcc-every", type=int, default=10, help="compile every Nth case with nvcc too (0: never)")
    p.add_argument("--dtype", default=None, choices=DTYPES,
                   help="input dtype (mixed: half weights, float32 activation); a replay reads it from the "
                        "case's text where not given")
    p.add_argument("--quiet", action="store_true", help="only the summary")
    p.add_argument("--replay", action="store_true", help="run the one case given by -c, --target, --config")
    p.add_argument("-c", dest="text", help="the case's program text (replay)")
    p.add_argument("--target", default="sm_90")
    p.add_argument("--config", default="{}", help="knob config as JSON (replay)")
    args = p.parse_args(argv)
    if args.replay:
        if not args.text:
            p.error("--replay needs -c TEXT")
        text = "\n".join(s.strip() for s in args.text.split(";"))
        case = Case(0, 0, text, (), args.target, json.loads(args.config), args.dtype or replay_dtype(text))
        out = run_case(case, timeout=args.timeout, nvcc=True)
        print(f"{out.status}: {out.stage} {out.message}".rstrip())
        return 0 if out.status != "fail" else 1
    print(f"templates: {len(covered_templates())} covered; registry ops no template uses: "
          f"{', '.join(uncovered_rules()) or 'none'}")
    report = fuzz(args.seed, args.cases, timeout=args.timeout, budget=args.budget, nvcc_every=args.nvcc_every,
                  start=args.start, dtype=args.dtype or "float32",
                  log=None if args.quiet else lambda line: print(line, flush=True))
    print(report.summary())
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
