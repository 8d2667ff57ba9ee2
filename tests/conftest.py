import os
import sys

import pytest
import torch

# benchmarks/ holds the plain-torch Llama layer that tests share with the benchmark script.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
