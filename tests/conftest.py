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


@pytest.fixture(scope="module")
def llama():
    """A tiny random transformers Llama (decoder_helpers.py), built once per test module."""
    from decoder_helpers import tiny_llama
    return tiny_llama()


@pytest.fixture(scope="module")
def llama_decoder(llama):
    """The prefill and decode programs of `llama` over a static cache of MAX_LENGTH positions."""
    from decoder_helpers import MAX_LENGTH

    from deplokit.generate import build_decoder
    return build_decoder(llama, max_length=MAX_LENGTH)
