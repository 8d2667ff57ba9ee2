"""Run every notebook of the series top to bottom and store its outputs (what nbval
compares in `make test`). Run after changing a notebook, the output it shows, or any
rendering (after merging, re-run it once over all of them):

    .venv/bin/python scripts/execute_notebooks.py [notebooks/NN_name.ipynb ...]

The kernel imports deplokit from this checkout (PYTHONPATH), hash seeds are fixed, and each
notebook seeds torch itself, so re-storing an unchanged notebook changes nothing but what
depends on the machine (masked for nbval by notebooks/sanitize.cfg, or in cells tagged
`nbval-ignore-output`)."""
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def execute(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    for i, cell in enumerate(nb.cells):          # stable ids and no run-specific metadata: clean diffs
        cell.id = f"cell-{i:02d}"
        cell.metadata.pop("execution", None)
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    nbformat.write(nb, path)
    print(f"executed {path.relative_to(ROOT)} in {time.monotonic() - start:.0f} s", flush=True)


if __name__ == "__main__":
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    os.environ["PYTHONHASHSEED"] = "0"
    paths = [Path(p).resolve() for p in sys.argv[1:]] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for p in paths:
        execute(p)
