"""How long the command line takes to answer when it needs no compiler: `deplokit --help`,
a usage error, `compile --help`, `bench --list`, against `import torch` for scale (issue 27:
`--help` took 8 s when every command imported torch before parsing).

    python benchmarks/bench_startup.py [--repeats 5]

Each is a fresh interpreter (`python -m deplokit ...`); the median wall time is printed."""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "deplokit --help": ["-m", "deplokit", "--help"],
    "deplokit compile --help": ["-m", "deplokit", "compile", "--help"],
    "deplokit run --bogus (usage error)": ["-m", "deplokit", "run", "--bogus"],
    "deplokit bench --suite llm --list": ["-m", "deplokit", "bench", "--suite", "llm", "--list"],
    "python -c 'import torch' (for scale)": ["-c", "import torch"],
}


def wall(args, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    width = max(map(len, CASES))
    for label, argv in CASES.items():
        print(f"{label:<{width}}  {wall(argv, args.repeats):6.2f} s (median of {args.repeats})", flush=True)


if __name__ == "__main__":
    main()
