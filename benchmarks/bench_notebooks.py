"""How long each notebook of the series takes to run top to bottom (issue 27: each under a
minute on a workshop machine, with and without nvcc), as nbval runs it in `make test`:

    python benchmarks/bench_notebooks.py [notebooks/NN_name.ipynb ...] [--no-nvcc]

Each notebook runs in a fresh kernel that imports deplokit from this checkout, with the
hash seed scripts/execute_notebooks.py uses; the stored notebook is not touched. --no-nvcc
runs it with nvcc's directory taken off PATH (the CPU-only workshop machine). Prints the
wall time of each and the slowest cell; a benchmark, not a test: times depend on the machine."""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def path_without_nvcc(path: str) -> str:
    """PATH with every directory that holds an nvcc left out."""
    return os.pathsep.join(d for d in path.split(os.pathsep) if not (Path(d) / "nvcc").exists())


def run(path: Path, timeout: int) -> tuple[float, float, int]:
    """(wall seconds, the slowest cell's seconds, its index) of one run of `path`."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    cells: list[tuple[float, int]] = []
    start = time.perf_counter()
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            t = time.perf_counter()
            client.execute_cell(cell, i)
            cells.append((time.perf_counter() - t, i))
    return time.perf_counter() - start, *max(cells, default=(0.0, -1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--no-nvcc", action="store_true", help="run with nvcc's directory off PATH")
    parser.add_argument("--timeout", type=int, default=600, help="seconds a cell may take")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    os.environ["PYTHONHASHSEED"] = "0"
    if args.no_nvcc:
        os.environ["PATH"] = path_without_nvcc(os.environ.get("PATH", ""))
    print(f"nvcc: {shutil.which('nvcc') or 'not on PATH'}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    paths = [p.resolve() for p in args.notebooks] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for p in paths:
        wall, slowest, cell = run(p, args.timeout)
        print(f"{p.name:32s} {wall:6.1f} s  (slowest: cell {cell}, {slowest:.1f} s)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
