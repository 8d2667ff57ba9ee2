"""The IR lexers over the whole test corpus: every text lexes back to itself with no error
token, and the token types mean what the lexers say."""
import pytest
from programs import config_of, corpus
from pygments import lex
from pygments.token import Error, Generic, Keyword, Name, Number

import deplokit
from deplokit.notebook.lexers import lexer_for

STAGES = ("torch", "tensor", "loop", "tile", "kernel", "cuda")


@pytest.fixture(scope="module")
def compiled():
    return {name: deplokit.compile(entry[0], *entry[1], config=config_of(entry)) for name, entry in corpus().items()}


@pytest.mark.parametrize("stage", STAGES)
def test_corpus_lexes_without_errors(compiled, stage):
    for name, c in compiled.items():
        text = str(c.ir(stage))
        tokens = list(lex(text, lexer_for(stage)))
        assert "".join(v for _, v in tokens) == text, name
        errors = [v for t, v in tokens if t in Error]
        assert not errors, (name, errors[:5])


def _tokens(text, stage):
    return [(t, v) for t, v in lex(text, lexer_for(stage)) if v.strip()]


def test_loop_ir_tokens():
    toks = _tokens("=== merged_relu -> relu ===\nfor a0 in 0..16:  # free (M)\n    acc0 <- add(acc0, v1)", "loop")
    assert toks[0] == (Generic.Heading, "=== merged_relu -> relu ===")
    assert (Keyword, "for") in toks and (Keyword, "in") in toks
    assert (Number, "0") in toks and (Number, "16") in toks
    assert (Name.Variable, "acc0") in toks and (Name.Function, "add") in toks


def test_tile_ir_tokens():
    toks = _tokens("Tile(axes=(a0:256=THREAD, a1:32=BLOCK)):\n    x_smem = Stage(x, origin=(0, a1, 0))", "tile")
    assert (Keyword.Type, "Tile") in toks and (Keyword.Type, "Stage") in toks
    assert (Keyword.Constant, "THREAD") in toks and (Keyword.Constant, "BLOCK") in toks
    assert (Name.Attribute, "axes") in toks and (Name.Attribute, "origin") in toks
    assert (Name.Variable, "x_smem") in toks


def test_kernel_and_tensor_ir_tokens():
    toks = _tokens("shared float x_smem[256]\nfloat acc0 = 0\nint a3 = tid.x\nbarrier", "kernel")
    assert (Keyword, "shared") in toks and (Keyword, "barrier") in toks
    assert (Keyword.Type, "float") in toks and (Name.Builtin, "tid.x") in toks
    toks = _tokens("ss = sum(sq, axis=-1) -> (4, 1) float32", "tensor")
    assert (Name.Variable, "ss") in toks and (Name.Function, "sum") in toks
    assert (Name.Attribute, "axis") in toks and (Number, "-1") in toks and (Keyword.Type, "float32") in toks
