"""The indentation-aware, word-marking diff the stepper and the pass diffs draw, and the
plain-text forms of IR objects at a Python prompt."""
import torch
from notebook_html import parse

import deplokit
from deplokit.notebook.diff import diff_html
from deplokit.notebook.linediff import diff_text, line_diff


def test_reindented_lines_are_one_row_each():
    before = "for i in 0..4:\n    x = load a[i]\n    y <- add(y, x)\n"
    after = "Tile(axes=(i:4=THREAD)):\n    x = load a[i]\n    y <- add(y, x)\n".replace("    ", "        ")
    rows = line_diff(before, after)
    assert [r.kind for r in rows] == ["remove", "add", "indent", "indent"]
    assert diff_text(rows).splitlines()[2] == "~        x = load a[i]"


def test_changed_words_are_marked_in_a_paired_line():
    rows = line_diff("x = Stage(a, slab=(i:16@0))\n", "x = Stage(a, slab=(i:32@0), prefetch=1)\n")
    old, new = rows
    assert (old.kind, new.kind) == ("remove", "add")
    assert [old.text[a:b] for a, b in old.marks] == ["16"]
    assert "32" in [new.text[a:b] for a, b in new.marks] and any("prefetch" in new.text[a:b] for a, b in new.marks)
    html = diff_html("x = Stage(a, slab=(i:16@0))", "x = Stage(a, slab=(i:32@0), prefetch=1)", "tile")
    parse(html)
    assert "rgba(46, 160, 67, 0.45)" in html and "rgba(248, 81, 73, 0.45)" in html


def test_long_unchanged_runs_become_a_gap():
    lines = [f"v{i} = load a[{i}]" for i in range(20)]
    rows = line_diff("\n".join(lines), "\n".join(lines[:10] + ["w = 1"] + lines[10:]))
    kinds = [r.kind for r in rows]
    assert kinds.count("gap") == 2 and kinds.count("add") == 1 and len(rows) == 9
    assert rows[0].text == "7 unchanged lines"
    assert line_diff("a\nb", "a\nb") == ()


def test_ir_objects_print_as_their_text_at_a_prompt():
    torch.manual_seed(0)
    c = deplokit.compile(torch.nn.RMSNorm(64), torch.randn(2, 64))
    for ir in (c.torch_ir, c.tensor_ir, c.loop_ir, c.tile_ir, c.tile_ir.kernels[0], c.kernel_ir,
               c.kernel_ir.kernels[0], c.cuda):
        assert repr(ir) == str(ir) and (ir is c.torch_ir or "\n" in repr(ir))
    assert repr(c) == "<Compilation sm_90: 1 torch op, 9 tensor nodes, 1 launch of 1 unique kernel>"
    check = repr(c.check(backend="loop"))
    assert check.startswith("ok: backend=loop") and "every element within atol + rtol*|expected|" in check


def test_a_large_graph_keeps_its_size_and_scrolls():
    import shutil

    import pytest
    if shutil.which("dot") is None:
        pytest.skip("graphviz dot is not installed")
    from deplokit.notebook.graph import FIT_GRAPH_NODES, graph_html

    def chain(x):
        for _ in range(FIT_GRAPH_NODES):
            x = torch.sin(x) + 1
        return x
    c = deplokit.compile(chain, torch.randn(4, 8))
    html = graph_html(c.tensor_ir, "tensor", c.tensor_ir, c.loop_ir)
    parse(html)
    assert "overflow: auto; max-height: 40em" in html and "scroll the box" in html
    assert 'style="max-width: 100%' not in html          # not shrunk to an unreadable width
    small = graph_html(deplokit.compile(torch.sin, torch.randn(3)).tensor_ir, "tensor")
    assert 'style="max-width: 100%' in small


def test_counts_read_as_words():
    torch.manual_seed(0)
    c = deplokit.compile(torch.nn.RMSNorm(64), torch.randn(2, 64))
    html = c._repr_mimebundle_()["text/html"]
    assert "1 torch op → 9 tensor nodes → 1 kernel" in html and "Torch IR · 1 op<" in html
    assert "1 ops" not in html and "1 kernels" not in html
