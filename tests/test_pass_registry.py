"""Every pass of the pipeline has a golden before/after test (the shape of test_pass_007.py).

Each golden test module names the passes it covers in `GOLDEN`; the pass lists come from the
tuples themselves (PIPELINE, which splices SCHEDULE and LOWERING), so a new pass without a
golden test fails here."""
import importlib

from deplokit.passes.lower import LOWERING
from deplokit.passes.schedule import SCHEDULE
from deplokit.pipeline import PIPELINE

GOLDEN_MODULES = ("test_pass_007", "test_pass_schedule", "test_pass_programs", "test_pass_decompose")

# Passes whose golden test is still to be written: each entry is a known gap, named here so
# that it shows (and so that a pass added to the pipeline cannot join it silently).
PENDING: dict[str, str] = {}


def golden() -> set:
    return set().union(*(importlib.import_module(m).GOLDEN for m in GOLDEN_MODULES))


def test_every_pass_has_a_golden_test():
    names = [p.name for p in PIPELINE]
    assert {p.name for p in SCHEDULE} | {p.name for p in LOWERING} <= set(names)
    missing = [n for n in names if n not in golden() and n not in PENDING]
    assert missing == [], f"passes without a golden before/after test: {missing}"


def test_golden_names_are_passes_and_pending_is_not_tested():
    names = {p.name for p in PIPELINE}
    assert golden() <= names | {f"decompose:{op}" for op in importlib.import_module("test_pass_decompose").RULES}
    assert not (golden() & set(PENDING))
