"""Whole models: presets by name (offline, weights on meta), transformers' own classes,
identical layers compiled once, the kernel inventory, and logits checked on the simulator
against transformers holding the same weights."""
import json
import re

import pytest
import torch

import deplokit
from deplokit.analysis.inventory import format_inventory, inventory
from deplokit.analysis.traffic import loop_kernel_cost
from deplokit.cli import main
from deplokit.compilation import compile_model
from deplokit.errors import ExecutionError, UnknownModelError, UnsupportedOpError
from deplokit.frontend import hf, models
from deplokit.frontend.presets import PRESETS
from deplokit.passes.schedule import SCHEDULE
from deplokit.runtime.device import gpu_available
from deplokit.runtime.nvcc import nvcc_available

transformers = pytest.importorskip("transformers")

TINYLLAMA, QWEN = "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "Qwen/Qwen2.5-7B"


def tiny_hf(name, **sizes):
    """transformers' model of the preset's architecture at toy sizes, random weights."""
    preset = models.tiny(PRESETS[name], **sizes)
    return hf.build_causal_lm(hf.config_from_preset(preset), preset.arch), preset


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


@pytest.mark.parametrize("name", [TINYLLAMA, QWEN])
@pytest.mark.parametrize("seq, dedup", [(8, False), (7, True)])
def test_transformers_model_logits_on_the_simulator(name, seq, dedup):
    model, preset = tiny_hf(name)
    ids = torch.randint(0, preset.vocab, (1, seq))
    c = deplokit.compile(model, ids, dedup=dedup)
    got = c.run(ids, backend="sim")
    want = logits(model, ids)
    assert isinstance(got, torch.Tensor) and got.shape == (1, seq, preset.vocab)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    # Qwen2's q/k/v biases are captured as parameters; Llama has none
    biases = [b.name for b in c.torch_ir.buffers if b.kind == "param" and b.name.endswith("proj_bias")]
    assert len(biases) == (3 * preset.layers if preset.qkv_bias else 0), biases
    assert c.check(ids, backend="sim").ok


def test_rope_is_applied_not_identity():
    """The compiled logits match transformers', and in this configuration the rotary
    embedding changes transformers' logits: a compiler that dropped RoPE would fail."""
    model, preset = tiny_hf(TINYLLAMA)
    ids = torch.randint(0, preset.vocab, (1, 9))
    with torch.no_grad():
        no_rope = model(input_ids=ids, position_ids=torch.zeros(1, 9, dtype=torch.int64), use_cache=False).logits
    want = logits(model, ids)
    assert (want - no_rope).abs().max() > 1e-2
    got = deplokit.compile(model, ids).run(ids, backend="loop")
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    # the rotary tables and the causal mask are folded constants, not computed at run time
    assert not any(op.op in ("cos", "sin", "arange") for op in deplokit.compile(model, ids).torch_ir.ops)


@pytest.mark.parametrize("name", [TINYLLAMA, QWEN])
def test_plain_torch_model_loads_transformers_weights(name):
    """Without transformers, deplokit's own module is used: same names, same logits."""
    model, preset = tiny_hf(name)
    plain = models.CausalLM(preset).eval()
    plain.load_state_dict(model.state_dict(), strict=True)
    ids = torch.randint(0, preset.vocab, (1, 7))
    want = logits(model, ids)
    c = deplokit.compile(plain, ids, dedup=True)
    torch.testing.assert_close(c.run(ids, backend="sim"), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["transformers", "plain"])
def test_named_model_has_no_weights_and_cannot_run(backend):
    program = models.build(models.tiny(PRESETS[QWEN]), seq=5, backend=backend)
    assert all(p.is_meta for p in program.fn.parameters())
    c = deplokit.compile(program.fn, *program.inputs, dedup=True)
    assert c.missing_weights and not c.values.keys() & set(c.missing_weights)
    assert "__global__" in str(c.cuda)
    with pytest.raises(ExecutionError, match="compile-only"):
        c.run(*program.inputs, backend="sim")
    with pytest.raises(ExecutionError, match="compile-only"):
        c.check()


def test_identical_layers_compile_once():
    """More layers add launches, not kernels: the CUDA holds each unique kernel once."""
    def compiled(layers):
        program = models.build(models.tiny(PRESETS[TINYLLAMA], layers=layers), seq=6, backend="plain")
        return deplokit.compile(program.fn, *program.inputs, dedup=True)

    three, five = compiled(3), compiled(5)
    assert len(five.loop_ir.kernels) > len(three.loop_ir.kernels)
    assert len(five.kernel_ir.kernels) == len(three.kernel_ir.kernels)
    assert str(five.cuda).count("__global__") == len(five.kernel_ir.kernels) < len(five.loop_ir.kernels)
    assert len(five.launches) == len(five.loop_ir.kernels)
    per_layer = (len(five.launches) - len(three.launches)) // 2
    runs = {e.kernel: e.launches for e in five.inventory() if not e.of}      # split-K reducers aside
    assert sum(runs.values()) == len(five.launches)
    assert max(runs.values()) >= 5 and per_layer >= 10
    assert "dedup" in [s.name for s in five.trace]


def test_residual_stream_is_stored_not_recomputed():
    """Each layer's norm reads the stored residual, not the whole stream back to the
    embedding: kernel inputs stay bounded however deep the model."""
    program = models.build(models.tiny(PRESETS[QWEN], layers=6), seq=4, backend="plain")
    c = deplokit.compile(program.fn, *program.inputs)
    assert max(len(k.inputs()) for k in c.loop_ir.kernels) <= 6
    fuse = next(s for s in c.trace if s.name == "fuse")
    assert any("copies would compound" in note for note in fuse.notes)


def test_inventory_counts_a_fused_swiglu_prologue_once_per_element():
    """silu(g) * u fused into down's K loop: its FLOPs per element of the operand, not per
    output column (the Qwen inventory's total counted it 128x per token)."""
    m, k, n = 64, 256, 128
    f = torch.nn.functional
    c = deplokit.compile(lambda g, u, w: f.linear(f.silu(g) * u, w), torch.randn(m, k), torch.randn(m, k),
                         torch.randn(n, k))
    (entry,) = c.inventory()
    prologue = entry.flops - 2 * m * k * n
    assert 0 < prologue <= 8 * m * k


def test_inventory_counts_bytes_and_flops():
    x, w, ids = torch.randn(16, 64), torch.randn(32, 64), torch.randint(0, 1000, (1, 8))
    c = deplokit.compile(torch.nn.functional.linear, x, w)
    (entry,) = c.inventory()
    assert entry.flops == 2 * 16 * 32 * 64
    assert entry.bytes == 4 * (16 * 64 + 32 * 64 + 16 * 32)
    assert entry.shapes == "(16, 64), (32, 64) -> (16, 32)"
    emb = torch.nn.Embedding(1000, 48)
    (k,) = deplokit.compile(emb, ids).loop_ir.kernels
    types = deplokit.compile(emb, ids).loop_ir.types()
    cost = loop_kernel_cost(k, types)
    assert cost.bytes == 8 * 8 + 4 * 8 * 48 * 2     # ids, the 8 rows read, the output
    assert cost.flops == 0
    text = format_inventory(inventory(c.loop_ir))
    assert text.splitlines()[0].split()[:2] == ["kernel", "launches"] and text.splitlines()[1].endswith("matmul")
    assert text.endswith("total: 1 launches of 1 unique kernels, 14.34 kB moved, 65.54 kFLOP\n")


def test_unsupported_op_names_the_layer():
    model, preset = tiny_hf(TINYLLAMA)

    class Cumprod(torch.nn.Module):
        def forward(self, x):
            return torch.cumprod(x, -1)

    model.model.layers[1].mlp.act_fn = Cumprod()
    ids = torch.randint(0, preset.vocab, (1, 5))
    with pytest.raises(
        UnsupportedOpError,
        match=r"aten\.cumprod\.default \(node \w+, in model\.layers\.1\.mlp\.act_fn \(Cumprod\)\) is not supported",
    ):
        deplokit.compile(model, ids)


def test_unknown_model_lists_presets():
    with pytest.raises(UnknownModelError, match="Qwen/Qwen2.5-7B, TinyLlama/TinyLlama-1.1B-Chat-v1.0"):
        models.resolve("meta-llama/Llama-3-8B")
    assert models.resolve("qwen2.5-7b").name == QWEN


def test_local_hf_cache_config_is_used(tmp_path, monkeypatch):
    snap = tmp_path / "models--TinyLlama--TinyLlama-1.1B-Chat-v1.0" / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    config = dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=96, hidden_size=32,
                  intermediate_size=48, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
                  max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0)
    (snap / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    program = models.build(TINYLLAMA, seq=4, backend="transformers")
    assert program.fn.lm.config.num_hidden_layers == 3
    c = deplokit.compile(program.fn, *program.inputs)
    assert c.loop_ir.types()[c.loop_ir.outputs[0]].shape == (1, 4, 96)


def test_cli_compiles_a_layer_and_prints_the_inventory_on_stderr(capsys):
    assert main(["compile", TINYLLAMA, "--seq", "16", "--layer", "2", "--ir", "loop"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("=== ") and "kernel inventory" not in out
    assert err.startswith(f"# {TINYLLAMA} (transformers, weights on meta) seq 16 layer 2: kernel inventory\n")
    # attention as one flash-attention kernel (fuse_attention); silu(gate) * up staged inside down_proj's
    # kernel (the staged prologue); split-K reduced inside the GEMM (no reducer launches): 12 kernels
    rows = [line.split() for line in err.splitlines()[2:-1]]
    kernels = sum(int(r[1]) for r in rows if not r[0].endswith("_reduce"))
    total = int(re.search(r"total: (\d+) launches", err)[1])
    assert kernels == 12 and total == sum(int(r[1]) for r in rows)
    # named by what they compute, in layer 2's words (analysis/computes.py)
    names = [r[0] for r in rows]
    assert {"layer2_self_attn_flash_attention", "layer2_input_layernorm_rms_norm", "layer2_mlp_down_proj_add",
            "layer2_self_attn_q_proj_rope"} <= set(names), names


@pytest.mark.parametrize("argv, message", [
    (["compile", "Llama-3-8B"], "unknown model 'Llama-3-8B'; built-in presets: Qwen/Qwen2.5-7B, TinyLlama/"),
    (["compile", QWEN, "--layer", "28"], "--layer 28 is out of range: Qwen/Qwen2.5-7B has layers 0..27"),
    (["compile", QWEN, "--seq", "0"], "--seq must be at least 1"),
    (["run", TINYLLAMA], "compile-only"),
])
def test_cli_model_errors_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("deplokit: error: ") and message in err and err.count("\n") == 1


def test_cli_rejects_model_flags_for_expressions(capsys):
    assert main(["compile", "-c", "torch.relu(torch.randn(4))", "--seq", "8"]) == 2
    assert "--seq applies to a named model" in capsys.readouterr().err


def test_qwen_7b_compiles_to_cuda_without_its_weights():
    """The full Qwen2.5-7B at seq 128: 28 layers, each kernel rendered once (~10 s)."""
    program = models.build(QWEN, seq=128)
    c = compile_model(program)
    entries = c.inventory()
    kernels = [e for e in entries if not e.of]                  # the Loop-IR kernels; e.of: a split-K reducer
    assert len(kernels) <= 20 and sum(e.launches for e in kernels) == len(c.loop_ir.kernels) >= 28 * 12
    assert str(c.cuda).count("__global__") == len(c.kernel_ir.kernels) == len(entries)
    assert c.loop_ir.types()[c.loop_ir.outputs[0]].shape == (1, 128, 152064)
    assert sum(e.launches * e.flops for e in entries) > 2 * 7e9 * 128 * 0.9   # ~2 FLOPs per weight per token


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs a CUDA device")
def test_tiny_model_on_the_gpu():
    if "cupy" not in deplokit.BACKENDS:
        pytest.skip("no cupy backend in this build")
    model, preset = tiny_hf(QWEN)
    ids = torch.randint(0, preset.vocab, (1, 7))
    c = deplokit.compile(model, ids)
    torch.testing.assert_close(c.run(ids, backend="cupy"), logits(model, ids), rtol=1e-4, atol=1e-5)


def test_model_text_is_deterministic():
    def text():
        program = models.build(models.tiny(PRESETS[QWEN], layers=3), seq=5, backend="transformers")
        c = deplokit.compile(program.fn, *program.inputs, dedup=True)
        return str(c.cuda) + str(c.loop_ir) + format_inventory(c.inventory()) + "\n".join(map(str, c.launches))

    assert text() == text()


def test_every_pass_checks_out_on_a_deduplicated_model():
    model, preset = tiny_hf(QWEN, layers=2, hidden=32, heads=2, kv_heads=1, intermediate=40, vocab=64)
    ids = torch.randint(0, preset.vocab, (1, 5))
    c = deplokit.compile(model, ids, dedup=True)
    checks = c.check_passes()
    assert len(checks) == len(SCHEDULE) and all(p.result.ok for p in checks), [str(p) for p in checks]


@pytest.mark.parametrize("backend", ["transformers", "plain"])
def test_one_layer_traced_and_stitched_matches_transformers(backend):
    """compile_model (the CLI's path) traces one decoder layer and stitches it N times;
    the logits are those of the whole model (eager transformers' on the same weights)."""
    preset = models.tiny(PRESETS[QWEN], layers=3)
    built = models.build(preset, seq=6, backend=backend, weights=True)
    ids = torch.randint(0, preset.vocab, (1, 6))
    c = compile_model(_with_inputs(built, ids))
    ops = [op.name for op in c.torch_ir.ops]
    assert sum(name.startswith("layer2_") for name in ops) == sum(name.startswith("layer0_") for name in ops) > 10
    assert {b.name for b in c.torch_ir.buffers if b.kind == "param"} == {
        "p_" + n.replace(".", "_") for n, _ in built.lm.named_parameters()}
    assert len(c.kernel_ir.kernels) < len(c.loop_ir.kernels)
    torch.testing.assert_close(c.run(ids, backend="sim"), built.fn(ids), rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("name, arch", [(TINYLLAMA, "sm_80"), (QWEN, "sm_90")])
def test_model_translation_unit_compiles_with_nvcc(name, arch):
    """The whole model's CUDA is one translation unit nvcc compiles, without spills."""
    c = compile_model(models.build(name, seq=32), target=arch)
    found = c.nvcc().stats
    assert all(found[k.name].registers is not None and found[k.name].spills == 0 for k in c.kernel_ir.kernels)


def test_without_transformers_the_plain_module_is_used(monkeypatch):
    monkeypatch.setattr(hf, "available", lambda: False)
    program = models.build(QWEN, seq=4, layer=0)
    assert isinstance(program.fn, models.LayerOnly) and "plain torch" in program.source
    attn = program.fn.model.layers["0"].self_attn
    assert attn.q_proj.bias is not None and attn.q_proj.weight.shape == (3584, 3584)   # Qwen2's q/k/v bias
    c = compile_model(program)
    assert c.loop_ir.types()[c.loop_ir.outputs[0]].shape == (1, 4, 3584)


def _with_inputs(built, ids):
    return models.ModelProgram(built.fn, (ids,), built.names, built.source, built.preset, True, built.lm,
                               built.layer_module)


def test_layers_that_differ_are_traced_whole():
    from dataclasses import replace

    from deplokit.frontend.stitch import layers_identical
    preset = models.tiny(PRESETS[TINYLLAMA], layers=2)
    built = models.build(preset, seq=5, backend="plain", weights=True)
    built.lm.model.layers[1].mlp = models.MLP(replace(preset, intermediate=40))
    assert not layers_identical(built.lm)
    ids = torch.randint(0, preset.vocab, (1, 5))
    c = compile_model(_with_inputs(built, ids))
    assert not any(op.name.startswith("layer1_") for op in c.torch_ir.ops)
    torch.testing.assert_close(c.run(ids, backend="loop"), built.fn(ids), rtol=1e-4, atol=1e-5)


def test_unsupported_op_in_a_stitched_layer_names_its_path():
    class Cumprod(torch.nn.Module):
        def forward(self, x):
            return torch.cumprod(x, -1)

    built = models.build(models.tiny(PRESETS[QWEN]), seq=4, backend="transformers")
    for layer in built.lm.model.layers:
        layer.mlp.act_fn = Cumprod()
    with pytest.raises(UnsupportedOpError, match=r"in model\.layers\.0\.mlp\.act_fn \(Cumprod\)\) is not supported"):
        compile_model(built)


def test_a_tinyllama_layers_kernels_are_named_by_what_they_compute():
    """`<layer>_<module>_<op>` (analysis/computes.py): RMSNorm, q/k/v projections, rope,
    attention, o_proj + residual, gate/up + silu·mul, down + residual; valid C, unique, and
    the same in the trace, the Kernel IR, the CUDA, the inventory and the timeline. Layer 1
    launches layer 0's kernels where they are identical (dedup keeps the first name)."""
    program = models.build(models.tiny(PRESETS[TINYLLAMA], layers=2), seq=8, backend="transformers")
    c = deplokit.compile(program.fn, *program.inputs, dedup=True)
    layer = ["input_layernorm_rms_norm", "self_attn_q_proj", "self_attn_k_proj", "self_attn_v_proj",
             "self_attn_q_proj_rope", "self_attn_k_proj_rope", "self_attn_flash_attention", "self_attn_o_proj_add",
             "post_attention_layernorm_rms_norm", "mlp_gate_proj", "mlp_up_proj",
             "mlp_down_proj_add"]     # silu(gate) * up staged inside down_proj's kernel (the fusion guard)
    names = [k.name for k in c.loop_ir.kernels]                 # the whole program (launches: c.launches)
    assert names[0] == "embed_tokens" and names[-2:] == ["norm_add_rms_norm", "lm_head"]
    assert names[1:13] == [f"layer0_{n}" for n in layer]
    # layer 1: its residual add moved into the norm after attention (the fusion guard's choice)
    assert names[13:25] == [f"layer1_{n}" for n in layer[:7]] + [
        "layer1_self_attn_o_proj", "layer1_post_attention_layernorm_add_rms_norm", "layer1_mlp_gate_proj",
        "layer1_mlp_up_proj", "layer1_mlp_down_proj"]
    assert len(set(names)) == len(names) and all(re.fullmatch(r"[A-Za-z_]\w*", n) for n in names)
    runs = {launch.kernel: launch.runs for launch in c.launches}
    assert runs["layer1_self_attn_q_proj"] == "layer0_self_attn_q_proj"
    assert runs["layer0_self_attn_v_proj"] == "layer0_self_attn_k_proj"        # the same shapes: one kernel
    assert runs["layer1_mlp_up_proj"] == "layer0_mlp_gate_proj"
    unique = [k.name for k in c.kernel_ir.kernels]
    assert unique == list(dict.fromkeys(runs.values())) and "layer0_self_attn_flash_attention" in unique
    cuda = str(c.cuda)
    assert all(f" {n}(" in cuda for n in unique)
    fuse = next(s for s in c.trace if s.name == "fuse")
    assert any(note.startswith("kernel layer0_mlp_down_proj_add fuses ") for note in fuse.notes)
    attention = next(s for s in c.trace if s.name == "fuse_attention")
    assert any(note.startswith("attention: kernel layer0_self_attn_flash_attention fuses layer0_self_attn_")
               for note in attention.notes)
    inv = c.inventory()
    assert [e.kernel for e in inv] == unique
    html = inv._repr_mimebundle_()["text/html"].replace("<wbr>", "")    # names may break at underscores
    assert all(f"<code>{n}</code>" in html for n in unique)
    assert all(n in str(inv) for n in unique)
    rows = c.timeline(layer=1).rows
    assert [(r.launch, r.kernel) for r in rows[:2]] == [
        ("layer1_input_layernorm_rms_norm", "layer0_input_layernorm_rms_norm"),
        ("layer1_self_attn_q_proj", "layer0_self_attn_q_proj")]


def test_a_kernel_outside_a_model_keeps_its_roots_name():
    """An expression has no module path: its kernels keep the fused root's name."""
    from deplokit.analysis.computes import module_part
    c = deplokit.compile(torch.nn.RMSNorm(64), torch.randn(4, 64))
    assert [k.name for k in c.loop_ir.kernels] == ["merged_rms_norm"]
    assert module_part(["mlp_gate_proj", "mlp_up_proj"]) == "mlp_gate_up"
    assert module_part(["self_attn_q_proj", "self_attn_k_proj", "self_attn_v_proj"]) == "self_attn"
    assert module_part(["q_proj", "k_proj", "v_proj"]) == "q_k_v"
