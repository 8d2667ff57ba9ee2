"""Issue 13 defects 5 (sizes) and 6 (unclear failures): zero-size tensors and tensors past
2**48 elements are refused with a DeplokitError at capture, a huge eager result of `-c`
text is refused before it is computed, and a torch.export'ed module compiles."""
from __future__ import annotations

import pytest
import torch
from defect_checks import check_everywhere
from torch import nn

import deplokit
from deplokit.errors import CaptureError, DeplokitError, ExpressionError
from deplokit.frontend.expression import load_expression


@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (2, 0, 3)])
def test_zero_size_input_is_a_capture_error(shape):
    with pytest.raises(CaptureError, match="no elements"):
        deplokit.compile(lambda x: x * 2, torch.randn(*shape))


def test_zero_size_output_is_a_capture_error():
    with pytest.raises(CaptureError, match="no elements"):
        deplokit.compile(lambda x: x[:, 4:] * 2, torch.randn(3, 4))


def test_zero_size_intermediate_that_cat_drops_still_compiles():
    check_everywhere(lambda x: torch.cat([x[:, 2:2], x], 1) * 2, torch.randn(3, 4), exact=True)


def test_more_elements_than_2_48_is_refused_at_capture():
    x = torch.randn(1, 1)
    with pytest.raises(CaptureError, match=r"2\*\*48"):
        deplokit.compile(lambda x: x.expand(2**25, 2**24) * 2, x)


def test_huge_eager_result_of_an_expression_is_refused_before_computing_it():
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ExpressionError, match="2\\*\\*31"):
        load_expression("x = torch.randn(1, 1); x.expand(2**16, 2**15) * 2")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 1_000_000   # KiB: under 1 GB


def test_torch_export_module_compiles():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    x = torch.randn(2, 8)
    exported = torch.export.export(m, (x,)).module()
    check_everywhere(exported, x, atol=1e-5)


def test_errors_are_deplokit_errors():
    assert issubclass(CaptureError, DeplokitError) and issubclass(ExpressionError, DeplokitError)
