import os
import sys

import pytest
import torch

# benchmarks/ holds the plain-torch Llama layer that tests share with the benchmark script.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _tune_cache_dir(tmp_path_factory, monkeypatch):
    """Never read or write the user's ~/.cache/deplokit: every test gets its own cache folder."""
    monkeypatch.setenv("DEPLOKIT_CACHE_DIR", str(tmp_path_factory.mktemp("deplokit_cache")))
