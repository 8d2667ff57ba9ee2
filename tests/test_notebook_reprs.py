"""Rich renderings: every IR, trace step and Compilation gives text/plain (the canonical
text) and text/html that parses, holds the expected structure and is deterministic."""
import os
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from notebook_html import parse, pre_texts
from programs import corpus

import deplokit
from deplokit import display
from deplokit.notebook import graph
from deplokit.notebook.style import breakable
from deplokit.runtime.device import gpu_available

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

HAS_DOT = shutil.which("dot") is not None
CODE_STAGES = ("loop", "tile", "kernel", "cuda")


def _relu_matmul(x, b, w):
    return torch.relu(torch.matmul(x + b, w))


def _compile_relu_matmul():
    torch.manual_seed(0)
    return deplokit.compile(_relu_matmul, torch.randn(16, 64), torch.randn(64), torch.randn(64, 16))


@pytest.fixture(scope="module")
def relu_matmul():
    return _compile_relu_matmul()


@pytest.fixture(scope="module")
def sdpa():
    fn, inputs = corpus()["sdpa_causal_gqa"]       # three kernels without attention's fusions
    return deplokit.compile(fn, *inputs, config={"fuse_rows.enable": False, "fuse_attention.enable": False})


@pytest.mark.parametrize("stage", ["torch", "tensor", "loop", "tile", "kernel", "cuda"])
def test_every_ir_gives_text_and_html(relu_matmul, stage):
    ir = relu_matmul.ir(stage)
    bundle = ir._repr_mimebundle_()
    assert bundle["text/plain"] == str(ir)
    page = parse(bundle["text/html"])
    titles = {"torch": "Torch IR", "tensor": "Tensor IR", "loop": "Loop IR", "tile": "Tile IR",
              "kernel": "Kernel IR", "cuda": "CUDA"}
    assert titles[stage] in bundle["text/html"]
    assert "--jp-" in bundle["text/html"]          # theme variables, with fallbacks
    if stage in CODE_STAGES:
        # the highlighted <pre> reads as exactly the IR text, and is highlighted
        assert pre_texts(bundle["text/html"]) == [str(ir)]
        assert sum(1 for t, _ in page.tags if t == "span") > 10


@pytest.mark.parametrize("stage", CODE_STAGES)
def test_kernels_render_alone(sdpa, stage):
    program = sdpa.ir(stage)
    if stage == "cuda":
        return
    for k in program.kernels:
        b = k._repr_mimebundle_()
        assert b["text/plain"] == str(k)
        parse(b["text/html"])
        assert pre_texts(b["text/html"]) == [str(k)]
        assert k.name in b["text/html"]


def test_keywords_are_coloured_inline(relu_matmul):
    html = relu_matmul.loop_ir._repr_mimebundle_()["text/html"]
    assert '<span style="color: var(--jp-mirror-editor-keyword-color, #1a7f37); font-weight: bold">for</span>' in html
    assert "var(--jp-mirror-editor-comment-color" in html      # `# reduce (K)`
    tile = relu_matmul.tile_ir._repr_mimebundle_()["text/html"]
    assert '>THREAD</span>' in tile and ">Tile</span>" in tile


@pytest.mark.skipif(not HAS_DOT, reason="graphviz dot is not installed")
def test_graph_colours_a_fused_program_as_one_kernel(relu_matmul):
    html = relu_matmul.torch_ir._repr_mimebundle_()["text/html"]
    parse(html)
    assert "<svg" in html and "<script" not in html
    # add, matmul and relu all land in merged_relu: one fill colour for the three ops
    fills = graph.dot_source(relu_matmul.torch_ir, graph.kernel_membership(relu_matmul.tensor_ir, relu_matmul.loop_ir),
                             ("merged_relu",), "torch")
    ops = [line for line in fills.splitlines() if "shape=box" in line]
    assert len(ops) == 3 and all(f'fillcolor="{graph.kernel_fill(0)}"' in line for line in ops)
    assert "merged_relu" in html                     # the legend
    # the text stays available under the drawing
    assert pre_texts(html) == [str(relu_matmul.torch_ir)]


def test_kernel_membership_follows_the_loop_ir(sdpa):
    member = graph.kernel_membership(sdpa.tensor_ir, sdpa.loop_ir)
    kernels = [k.name for k in sdpa.loop_ir.kernels]
    # every kernel's outputs are its own, and every node computed lands in some kernel
    for k in sdpa.loop_ir.kernels:
        for out in k.outputs:
            assert member[out] == (k.name,)
    assert set(member) == {n.name for n in sdpa.tensor_ir.nodes}
    assert {k for ks in member.values() for k in ks} == set(kernels)
    # a stored buffer read by a later kernel is not pulled into it
    stored = {b.name for b in sdpa.loop_ir.written}
    for name, ks in member.items():
        if name in stored:
            assert len(ks) == 1


@pytest.mark.skipif(not HAS_DOT, reason="graphviz dot is not installed")
def test_three_kernels_three_colours(sdpa):
    dot = graph.dot_source(sdpa.tensor_ir, graph.kernel_membership(sdpa.tensor_ir, sdpa.loop_ir),
                           tuple(k.name for k in sdpa.loop_ir.kernels), "tensor")
    used = {graph.kernel_fill(i) for i in range(3)}
    assert all(c in dot for c in used)
    html = sdpa.tensor_ir._repr_mimebundle_()["text/html"]
    parse(html)
    assert html.count("<svg") == 1


def test_without_dot_the_graph_is_highlighted_text_and_a_note(relu_matmul, monkeypatch):
    monkeypatch.setattr(graph, "DOT_BINARY", "deplokit-no-such-dot")
    for ir in (relu_matmul.torch_ir, relu_matmul.tensor_ir):
        html = ir._repr_mimebundle_()["text/html"]
        parse(html)
        assert "<svg" not in html
        assert "install graphviz" in html and "apt-get install graphviz" in html
        assert pre_texts(html) == [str(ir)]


def test_trace_steps_render_as_coloured_diffs(relu_matmul):
    by_name = {s.name: s for s in relu_matmul.trace}
    step = by_name["007_stage_inputs"]
    b = step._repr_mimebundle_()
    assert b["text/plain"] == str(step)
    assert b["text/plain"].splitlines()[0] == ">>> t:007_stage_inputs"
    page = parse(b["text/html"])
    html = b["text/html"]
    assert "t:007_stage_inputs" in html and "hoist hot input slabs" in html     # name and DESCRIPTION
    assert "stage=True" in html                                                 # its params
    assert "rgba(46, 160, 67" in html and "rgba(248, 81, 73" in html           # added green, removed red
    assert "opacity: 0.6" in html                                               # context dim
    rows = [a.get("style", "") for t, a in page.tags if t == "span" and "display: block" in a.get("style", "")]
    added = sum("rgba(46, 160, 67" in r for r in rows)
    removed = sum("rgba(248, 81, 73" in r for r in rows)
    text_lines = b["text/plain"].splitlines()
    assert added == sum(1 for line in text_lines if line.startswith("+"))
    assert removed == sum(1 for line in text_lines if line.startswith("-"))
    skipped = by_name["003_split_matmul_k"]
    sb = skipped._repr_mimebundle_()
    assert sb["text/plain"].startswith("--- t:003_split_matmul_k skipped: ")
    assert "skipped: " in sb["text/html"] and "rgba(46, 160, 67" not in sb["text/html"]


def test_compilation_overview(relu_matmul):
    b = relu_matmul._repr_mimebundle_()
    assert b["text/plain"] == repr(relu_matmul)
    html = b["text/html"]
    page = parse(html)
    assert sum(1 for t, _ in page.tags if t == "details") >= 8     # stages and trace collapse, no JS
    assert "<summary" in html
    (kernel,) = relu_matmul.kernel_ir.kernels
    assert "merged_relu" in html and str(tuple(kernel.block)) in html  # the kernel table: its block
    assert "005_blockify_launch.block_threads" in html              # its knobs
    assert "✓ matches torch eager" in html                          # the simulator check
    for stage in ("Torch IR", "Tensor IR", "Loop IR", "Tile IR", "Kernel IR", "CUDA"):
        assert f"<summary style=\"cursor: pointer; font-weight: 600; margin: 4px 0;\">{stage}</summary>" in html


def test_check_results_say_where_they_ran(relu_matmul):
    result = relu_matmul.check(backend="sim")
    html = result._repr_mimebundle_()["text/html"]
    parse(html)
    assert "SIMT simulator" in html
    if not gpu_available():
        assert "no GPU found" in html
    auto = relu_matmul.check()
    assert "SIMT simulator" in auto._repr_mimebundle_()["text/html"] or gpu_available()
    checks = relu_matmul.check_passes()
    for c in checks:
        b = c._repr_mimebundle_()
        assert b["text/plain"] == str(c)
        parse(b["text/html"])
        assert f"t:{c.name}" in b["text/html"]


def test_bundles_are_deterministic():
    """Two compiles of the same program render byte-identical bundles."""
    def bundles(c):
        objs = [c.torch_ir, c.tensor_ir, c.loop_ir, c.tile_ir, c.kernel_ir, c.cuda, c] + list(c.trace)
        return [o._repr_mimebundle_() for o in objs]
    first, second = bundles(_compile_relu_matmul()), bundles(_compile_relu_matmul())
    assert first == second
    for b in first:
        assert "uuid" not in b["text/html"].lower() and " id=\"deplokit" not in b["text/html"]


def test_include_and_exclude(relu_matmul):
    assert set(relu_matmul.loop_ir._repr_mimebundle_(include=["text/plain"])) == {"text/plain"}
    assert set(relu_matmul.loop_ir._repr_mimebundle_(exclude=["text/html"])) == {"text/plain"}


def test_a_renderer_missing_a_library_falls_back_to_text():
    class Thing(display.Displayable):
        def __str__(self):
            return "thing text"

    def needs_missing_library(obj):
        raise ImportError("no module named fancy")
    display.register(Thing, needs_missing_library)
    assert Thing()._repr_mimebundle_() == {"text/plain": "thing text"}


_CORE_ONLY = r"""
import builtins, sys
BLOCKED = {"pygments", "graphviz", "ipywidgets", "matplotlib", "IPython", "deplokit.notebook"}
real_import = builtins.__import__
def guarded(name, *a, **k):
    if name.split(".")[0] in BLOCKED or name in BLOCKED:
        raise ImportError(f"blocked: {name}")
    return real_import(name, *a, **k)
builtins.__import__ = guarded
import importlib
real_im = importlib.import_module
def guarded_im(name, *a, **k):
    if name in BLOCKED or name.split(".")[0] in BLOCKED:
        raise ImportError(f"blocked: {name}")
    return real_im(name, *a, **k)
importlib.import_module = guarded_im
import torch, deplokit
c = deplokit.compile(lambda x: torch.relu(x) * 2.0, torch.randn(4, 8))
for ir in (c.torch_ir, c.loop_ir, c.cuda, c, c.trace[3]):
    b = ir._repr_mimebundle_()
    assert b == {"text/plain": str(ir)}, (type(ir), list(b))
assert c.check(backend="sim").ok
print("core ok")
"""


def test_core_import_works_without_the_notebook_extra():
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-c", _CORE_ONLY], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "core ok" in out.stdout


def test_core_import_does_not_load_drawing_libraries():
    code = ("import sys, torch, deplokit\n"
            "c = deplokit.compile(lambda x: x + 1.0, torch.randn(3))\n"
            "print(sorted(m for m in ('pygments', 'graphviz', 'ipywidgets', 'matplotlib', 'deplokit.notebook') "
            "if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_odd_programs_render(sdpa):
    """A multi-kernel program with gathers, masks and odd sizes renders at every stage."""
    for stage in ("torch", "tensor", "loop", "tile", "kernel", "cuda"):
        b = sdpa.ir(stage)._repr_mimebundle_()
        parse(b["text/html"])
    b = sdpa._repr_mimebundle_()
    parse(b["text/html"])
    assert all(k.name in b["text/html"] for k in sdpa.kernel_ir.kernels)


def test_names_are_escaped():
    """Tensor names and text reach the page escaped."""
    from deplokit.notebook.highlight import highlight_html
    html = highlight_html("x = load a[<b>&]", "loop")
    assert "b" not in {t for t, _ in parse(html).tags}
    assert pre_texts(html) == ["x = load a[<b>&]"]


def test_layer_with_many_kernels_renders():
    fn, inputs = corpus()["llama_layer_small"]
    c = deplokit.compile(fn, *inputs)
    b = c.tensor_ir._repr_mimebundle_()
    parse(b["text/html"])
    if HAS_DOT:
        assert "<svg" in b["text/html"]
        # 13 kernels, each with a legend chip
        assert all(f"<code>{k.name}</code>" in b["text/html"] for k in c.loop_ir.kernels)


def test_module_program_renders_torch_graph():
    torch.manual_seed(0)
    c = deplokit.compile(nn.RMSNorm(100), torch.randn(3, 100))
    b = c.torch_ir._repr_mimebundle_()
    parse(b["text/html"])
    assert "rms_norm" in b["text/html"]


def test_the_inventory_and_a_timeline_have_html_and_count_reducers():
    """One vocabulary: launches (reducers included) and unique kernels; an HTML inventory
    that does not wrap; one layer's launches in order with bytes, FLOPs and model µs."""
    import torch

    import deplokit
    torch.manual_seed(0)
    mm = deplokit.compile(torch.matmul, torch.randn(512, 128), torch.randn(128, 512),
                          config={"003_split_matmul_k.reduce": "reducer"})
    inv = mm.inventory()
    assert [e.of for e in inv] == ["", inv[0].kernel] and inv.reducers == 1 and inv.launches == 2
    assert str(inv).splitlines()[-1].startswith("total: 2 launches of 2 unique kernels (1 split-K reducer among them)")
    assert len(inv) == sum("__global__" in line for line in str(mm.cuda).splitlines())
    html = inv._repr_mimebundle_()["text/html"]
    assert "split-K reducer, after each" in html and "white-space: nowrap" in html
    t = mm.timeline()
    assert [r.kernel for r in t.rows] == [e.kernel for e in inv] and t.label == "the program"
    assert t.rows[1].start_us == t.rows[0].model_us and t.model_us == sum(r.model_us for r in t.rows) > 0
    assert t.rows[0].bytes == inv[0].bytes and t.rows[0].flops == inv[0].flops
    html = t._repr_mimebundle_()["text/html"]
    assert html.count("flex: 0 0") == 2 and "timeline of the program" in html
    # a launch of another's kernel (here the reducer) says which it runs, under its name: no column of repeats
    assert html.count("runs <code>") == 1 and f"runs <code>{breakable(inv[1].kernel)}</code>" in html


def test_wide_tables_fit_or_scroll_inside_the_notebook():
    """JupyterLab's output row hides what overflows it: the inventory, timeline and roofline
    tables sit in their own sideways-scrolling box (contained, so the table cannot widen the
    output), and kernel names may wrap at their underscores so that the FLOPs and µs columns
    fit a laptop's notebook."""
    import torch

    import deplokit
    from deplokit.notebook.style import SCROLL_X
    from deplokit.notebook.tables import knobs_table
    from deplokit.tune.roofline import roofline_of
    torch.manual_seed(0)
    mm = deplokit.compile(torch.matmul, torch.randn(512, 128), torch.randn(128, 512),
                          config={"003_split_matmul_k.reduce": "reducer"})
    assert "contain: inline-size" in SCROLL_X and "overflow-x: auto" in SCROLL_X
    for shown in (mm.inventory(), mm.timeline(), roofline_of(mm)):
        html = shown._repr_mimebundle_()["text/html"]
        parse(html)
        assert html.count(f'<div style="{SCROLL_X}"><table') == 1
    assert f'<div style="{SCROLL_X}"><table' in knobs_table()._repr_html_()
    name = mm.inventory()[1].kernel
    html = mm.inventory()._repr_mimebundle_()["text/html"]
    assert "_" in name and f"<code>{breakable(name)}</code>" in html
    assert breakable(name).count("<wbr>") == name.count("_")
    assert str(mm.inventory()).count(name) >= 1 and "<wbr>" not in str(mm.inventory())     # the text is the names


def test_a_kernel_says_what_it_computes_in_the_models_words():
    """A layer's kernels, named by the weights they read and the arithmetic they do."""
    from deplokit.analysis.computes import computes, merged_labels, module_of
    from deplokit.frontend import models
    from deplokit.frontend.presets import PRESETS
    assert module_of("p_model_layers_0_self_attn_q_proj_weight") == "self_attn.q_proj"
    assert module_of("p_model_layers_3_input_layernorm_weight") == "input_layernorm"
    assert module_of("p_lm_head_weight") == "lm_head"
    assert module_of("p_inner_model_model_layers_2_mlp_down_proj_weight") == "mlp.down_proj"    # decode's wrapper
    assert module_of("p_inner_model_lm_head_weight") == "lm_head"
    assert merged_labels(["mlp.gate_proj: matmul", "mlp.up_proj: matmul"]) == "mlp.gate_proj / mlp.up_proj: matmul"
    program = models.build(models.tiny(PRESETS["TinyLlama/TinyLlama-1.1B-Chat-v1.0"], layers=1), seq=8,
                           backend="transformers")
    import deplokit
    c = deplokit.compile(program.fn, *program.inputs)
    said = [computes(k) for k in c.loop_ir.kernels]
    # silu(gate) * up is staged inside down_proj's kernel (the fusion guard), so no kernel of its own
    for expected in ("input_layernorm: rmsnorm", "self_attn.q_proj: matmul", "rope",
                     "self_attn.o_proj: matmul", "mlp.down_proj: matmul", "lm_head: matmul"):
        assert expected in said, (expected, said)
    t = c.timeline(layer=None)                  # the whole program, every launch in order
    assert [r.computes for r in t.rows if not r.of] == said
