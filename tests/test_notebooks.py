"""The notebook series is stored executed, outputs included, so that nbval (run by
`make test` over notebooks/) compares what each cell teaches with what it prints now. This
checks the stored form: every code cell ran, in order, without an error, and nothing in
an output depends on the machine it ran on."""
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
SERIES = ["00_quickstart", "01_ir_hierarchy", "02_tile_ir_scheduling", "03_autotuning", "04_full_model", "05_generate",
          "06_tensor_cores"]


def _cells(path):
    return json.loads(path.read_text())["cells"]


def test_the_series_is_there():
    assert [p.stem for p in NOTEBOOKS] == SERIES


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_executed_in_order_without_errors(path):
    code = [c for c in _cells(path) if c["cell_type"] == "code"]
    assert code, "a notebook without code"
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1)), \
        "run the notebook top to bottom once (scripts/execute_notebooks.py) before committing"
    for c in code:
        assert not any(o["output_type"] == "error" for o in c["outputs"]), "".join(c["source"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_hold_nothing_machine_specific(path):
    text = json.dumps([c.get("outputs", []) for c in _cells(path)])
    for pattern in (r"/tmp/", r"/home/", r"/root/", r"/work/", r" at 0x[0-9a-f]{6,}"):
        assert not re.search(pattern, text), f"{pattern} in the outputs of {path.name}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_teaches_and_ends_with_exercises(path):
    cells = _cells(path)
    prose = [c for c in cells if c["cell_type"] == "markdown"]
    assert len(prose) >= len(cells) // 3, "prose between the cells"
    heads = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "## Exercises" in "".join(c["source"])]
    assert heads, "an Exercises section"
    assert all(re.search(r"Exercise|<summary>(Hint|Solution) \d", "".join(c["source"]))
               for c in cells[heads[-1]:]), "the exercises come last"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_nbval_markers_are_cell_tags_not_comments(path):
    for c in _cells(path):
        assert "NBVAL" not in "".join(c["source"]), "students would see it: tag the cell instead"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_widgets_keep_only_their_static_form(path):
    # a stored widget view names a model of the kernel that ran it: JupyterLab opening the
    # notebook would show "Error displaying widget: model not found" instead of its HTML
    for c in _cells(path):
        for o in c.get("outputs", []):
            assert "application/vnd.jupyter.widget-view+json" not in o.get("data", {}), (
                "store the notebook with scripts/execute_notebooks.py (it keeps the widget's HTML or PNG)")
