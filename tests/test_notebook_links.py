"""The notebooks link the source of what they show (issue 23): each links docs/CORE.md, the
module of every IR its prose names (Torch IR ... Kernel IR) and the file of every numbered
pass it names (007, k002), and every relative link it has points at a file that exists.
Reads the markdown cells only: no notebook runs."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
IRS = {"Torch IR": "deplokit/ir/torch_ir.py", "Tensor IR": "deplokit/ir/tensor_ir.py",
       "Loop IR": "deplokit/ir/loop_ir.py", "Tile IR": "deplokit/ir/tile_ir.py",
       "Kernel IR": "deplokit/ir/kernel_ir.py"}


def markdown(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def named_sources(text: str) -> set[str]:
    """The files of the IRs and numbered passes that `text` names."""
    out = {f for term, f in IRS.items() if term in text}
    for n in re.findall(r"\b(0(?:0[1-9]|1[0-6]))\b", text):
        out |= {p.relative_to(ROOT).as_posix() for p in ROOT.glob(f"deplokit/passes/schedule/t{n}_*.py")}
    for n in re.findall(r"\bk(00[1-9])\b", text):
        out |= {p.relative_to(ROOT).as_posix() for p in ROOT.glob(f"deplokit/passes/lower/k{n}_*.py")}
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_links_the_sources_it_names(path):
    text = markdown(path)
    links = set(re.findall(r"\]\(\.\./([^)#\s]+)", text))
    assert "docs/CORE.md" in links
    assert not named_sources(text) - links, sorted(named_sources(text) - links)
    assert all((ROOT / link).exists() for link in links), [link for link in links if not (ROOT / link).exists()]


def test_the_pass_names_are_found():
    """The check above finds what it looks for (a pass number and an IR name in prose)."""
    assert named_sources("pass 007 stages the Loop IR") == {"deplokit/passes/schedule/t007_stage_inputs.py",
                                                           "deplokit/ir/loop_ir.py"}
    assert len(NOTEBOOKS) >= 7
