"""README stays true: its figures are what scripts/readme_figures.py computes now, its Layout
section names files that exist and every package, and each wing of the code has its doc."""
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
WINGS = ["deplokit/frontend", "deplokit/ir", "deplokit/passes", "deplokit/passes/decompose", "deplokit/passes/fuse",
         "deplokit/passes/schedule", "deplokit/passes/lower", "deplokit/runtime", "deplokit/tune",
         "deplokit/notebook", "deplokit/analysis", "deplokit/cli",
         # the advanced features beside the core (docs/CORE.md)
         "deplokit/passes/flash", "deplokit/passes/rows", "deplokit/passes/tma", "deplokit/passes/split",
         "deplokit/passes/repack", "deplokit/passes/mma", "deplokit/tune/sass_model"]


def _figures():
    spec = importlib.util.spec_from_file_location("readme_figures", ROOT / "scripts" / "readme_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


figures = _figures()


def test_every_marked_figure_is_one_the_script_computes():
    present = figures.marked(README)
    assert set(present) == set(figures.FIGURES)


def test_the_marker_regeneration_rewrites_only_marked_text(monkeypatch):
    text = "a <!-- figure:rmsnorm-knob-space -->old<!-- /figure --> b <!-- figure:other -->x<!-- /figure -->"
    monkeypatch.setitem(figures.FIGURES, "rmsnorm-knob-space", ("cheap", lambda: "new"))
    assert figures.regenerate(text, ["rmsnorm-knob-space"]) == \
        "a <!-- figure:rmsnorm-knob-space -->new<!-- /figure --> b <!-- figure:other -->x<!-- /figure -->"


@pytest.mark.parametrize("name", sorted(n for n, (kind, _) in figures.FIGURES.items() if kind == "cheap"))
def test_cheap_figures_match_what_deplokit_computes(name):
    assert figures.marked(README)[name] == figures.FIGURES[name][1](), \
        f"README figure {name} drifted: python scripts/readme_figures.py --only {name}"


@pytest.mark.slow
def test_model_figures_match_what_deplokit_computes():
    """The Qwen2.5-7B and TinyLlama figures (two whole-model compiles, weights on meta)."""
    present = figures.marked(README)
    for name, (kind, compute) in sorted(figures.FIGURES.items()):
        if kind == "model":
            assert present[name] == compute(), f"README figure {name} drifted: python scripts/readme_figures.py"


def _layout() -> str:
    return README[README.index("## Layout"):README.index("\n## ", README.index("## Layout") + 1)]


def test_layout_names_only_files_that_exist():
    layout = _layout()
    folders = re.findall(r"`((?:deplokit|notebooks|tests|benchmarks|scripts|docs|binder)/[\w/.]*)`", layout)
    assert folders, "the Layout section names no paths"
    missing = [p for p in folders if not (ROOT / p).exists()]
    # bare file names are checked inside the folder their bullet names first
    for bullet in re.split(r"\n- ", layout)[1:]:
        where = re.search(r"`(deplokit(?:/\w+)*)/`", bullet)
        base = ROOT / (where.group(1) if where else "deplokit")
        for name in re.findall(r"`([\w/]+\.(?:py|md|cfg|ipynb))`", bullet):
            if "/" not in name and not any(base.rglob(name)) and not any(
                    any((ROOT / top).rglob(name)) for top in ("deplokit", "scripts", "notebooks", "docs", "tests")):
                missing.append(name)
    assert missing == []


def test_layout_names_every_package():
    layout = _layout()
    packages = sorted(str(p.parent.relative_to(ROOT)) for p in (ROOT / "deplokit").rglob("__init__.py"))
    unnamed = [p for p in packages if p != "deplokit" and f"`{p}/`" not in layout
               and f"`{p.split('/')[-1]}/`" not in layout]
    assert unnamed == []


def test_layout_has_no_stray_fragment_lines():
    """Every line of the section is a bullet or continues one (no pasted half-sentences)."""
    lines = _layout().split("\n- ", 1)[1].splitlines()
    for previous, line in zip(lines, lines[1:]):
        if line and not line.startswith(("- ", "  ")):
            pytest.fail(f"stray line in Layout: {line!r}")
        if line.startswith("  (") and previous.rstrip().endswith("."):
            pytest.fail(f"a bullet continues after its full stop: {line!r}")


@pytest.mark.parametrize("wing", WINGS)
def test_each_wing_has_a_short_doc(wing):
    doc = ROOT / wing / "README.md"
    assert doc.exists(), f"{wing} has no README.md"
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# ") and 200 < len(text) < 6000
    for name in re.findall(r"`(\w+\.py)`", text):      # the files it names are there
        assert any((ROOT / wing).rglob(name)), f"{wing}/README.md names {name}, which is not in {wing}"
