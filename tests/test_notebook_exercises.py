"""Every exercise of the notebook series has a cell to work in, a collapsible hint and a
collapsible solution; each solution runs as written (its asserts check the answer)."""
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
SOLUTION = re.compile(r"<details><summary>Solution (\d+)</summary>\s*```python\n(.*?)```", re.S)


def _exercises(path):
    cells = json.loads(path.read_text())["cells"]
    out = []
    for i, c in enumerate(cells):
        text = "".join(c["source"])
        m = re.match(r"### Exercise (\d+)", text) if c["cell_type"] == "markdown" else None
        if m:
            out.append((int(m.group(1)), cells[i + 1:i + 4]))
    return out


def _solutions():
    for path in NOTEBOOKS:
        for n, (work, hint, solution) in _exercises(path):
            m = SOLUTION.search("".join(solution["source"]))
            yield pytest.param(path, n, m.group(2) if m else "", id=f"{path.stem}-ex{n}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_exercise_has_a_cell_a_hint_and_a_solution(path):
    exercises = _exercises(path)
    assert [n for n, _ in exercises] == list(range(1, len(exercises) + 1)) and len(exercises) >= 2
    for n, (work, hint, solution) in exercises:
        assert work["cell_type"] == "code" and "your code here" in "".join(work["source"])
        assert "".join(hint["source"]).startswith(f"<details><summary>Hint {n}</summary>")
        assert SOLUTION.search("".join(solution["source"])), f"exercise {n}: no python solution"


@pytest.mark.parametrize("path, n, solution", list(_solutions()))
def test_solution_runs(path, n, solution, tmp_path, monkeypatch, capsys):
    import matplotlib
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)                # a solution's files (a tuning cache) land here
    monkeypatch.setenv("HOME", str(tmp_path))
    exec(compile(solution, f"{path.name}:solution {n}", "exec"), {"__name__": "__solution__"})
