"""ruff (rules in pyproject.toml's [tool.ruff]) finds nothing in the package, the tests, the
scripts or the benchmarks: `make test` is the lint CI runs."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed (pip install -e '.[test]')")
def test_ruff_check_is_clean():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "deplokit", "tests", "scripts", "benchmarks"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
