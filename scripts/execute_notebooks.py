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
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
STATIC = ("text/html", "image/png", "image/svg+xml")


def drop_widget_views(nb) -> None:
    """Stored outputs keep a widget's static form only: a stored widget view names a model
    that exists only in the kernel that ran it, so JupyterLab opening the notebook shows
    "Error displaying widget: model not found" instead of the HTML (or PNG) beside it. Run
    the cell and the live widget is back; nbval does not compare widget views."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW in data and any(k in data for k in STATIC):
                del data[WIDGET_VIEW]


def execute(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    for i, cell in enumerate(nb.cells):          # stable ids and no run-specific metadata: clean diffs
        cell.id = f"cell-{i:02d}"
        cell.metadata.pop("execution", None)
    drop_widget_views(nb)
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    nbformat.write(nb, path)
    print(f"executed {path.relative_to(ROOT)} in {time.monotonic() - start:.0f} s", flush=True)


if __name__ == "__main__":
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    os.environ["PYTHONHASHSEED"] = "0"
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        sys.exit(0)
    paths = [Path(p).resolve() for p in sys.argv[1:]] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    missing = [str(p) for p in paths if p.suffix != ".ipynb" or not p.is_file()]
    if missing:
        sys.exit(f"execute_notebooks: not a notebook file: {', '.join(missing)}")
    for p in paths:
        execute(p)
