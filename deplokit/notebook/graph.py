"""Torch IR and Tensor IR as dataflow graphs (graphviz SVG), coloured by the Loop-IR kernel
each node ends up in, so fusion is visible: one colour, one kernel.

Which kernel a node lands in is read off the Loop IR: a kernel computes its outputs and
every node inlined into them, i.e. everything reachable backwards from an output without
crossing a stored buffer. A node recomputed in two kernels gets both colours (striped).
Without the `dot` binary the graph is the highlighted text plus a note on installing it."""
from __future__ import annotations

import re
import shutil
import subprocess

from ..errors import DeplokitError
from ..ir.tensor_ir import Elementwise, IndexMap, Reduction
from ..ir.torch_ir import TorchProgram
from ..pipeline import Context, lower_through
from ..target import get_target
from .highlight import highlight_html
from .style import BORDER, FG_DIM, UNFUSED_FILL, box, details, esc, kernel_fill, note, title

DOT_BINARY = "dot"          # looked up on PATH at each drawing
MAX_GRAPH_NODES = 400       # past this a drawing is unreadable: text only
FIT_GRAPH_NODES = 40        # up to this a graph shrinks to the page's width; larger ones keep
                            # their drawn size (labels stay legible) and scroll in their box
INSTALL_NOTE = ("graphviz's <code>dot</code> was not found, so the graph is shown as text; install graphviz "
                "(<code>apt-get install graphviz</code>, <code>brew install graphviz</code> or "
                "<code>conda install graphviz</code>) to draw it.")
EDGE_COLOR = "#8c959f"      # mid grey: visible on light and dark pages alike


def kernel_membership(tensor_program, loop_program) -> dict[str, tuple[str, ...]]:
    """Tensor-IR node name -> the Loop-IR kernels that compute it, in kernel order."""
    nodes = {n.name: n for n in tensor_program.nodes}
    stored = {b.name for b in loop_program.written}
    out: dict[str, list[str]] = {}
    for kernel in loop_program.kernels:
        todo, seen = list(kernel.outputs), set()
        while todo:
            name = todo.pop()
            if name in seen or name not in nodes:
                continue
            seen.add(name)
            out.setdefault(name, [])
            if kernel.name not in out[name]:
                out[name].append(kernel.name)
            todo += [i for i in nodes[name].inputs() if i not in stored or i in kernel.outputs]
    return {k: tuple(v) for k, v in out.items()}


def lower_for_graph(program, target: str = "sm_90"):
    """(Tensor IR, Loop IR) for a Torch- or Tensor-IR program on its own (no Compilation at
    hand): the pipeline's passes through row fusion, as compile runs them for `target`."""
    ctx = Context(get_target(target))
    tensor = lower_through(program, "decompose", ctx) if isinstance(program, TorchProgram) else program
    return tensor, lower_through(tensor, "fuse_rows", ctx, first="lift")


def _label(*lines: str) -> str:
    return "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in lines)


def _op_text(node) -> str:
    if isinstance(node, Elementwise):
        return node.op
    if isinstance(node, Reduction):
        return str(node).split(" = ", 1)[1].split(" -> ")[0].replace(f"({node.src}, ", "(")
    if isinstance(node, IndexMap):
        return "index " + str(node).split(" = ", 1)[1].split(" -> ")[0]
    return getattr(node, "op", type(node).__name__)


def _type_text(t) -> str:
    return str(t).replace(" float32", "")


def dot_source(program, membership: dict[str, tuple[str, ...]], kernels: tuple[str, ...], name: str) -> str:
    """DOT text: buffers as ellipses, ops as boxes filled with their kernel's colour."""
    color = {k: kernel_fill(i) for i, k in enumerate(kernels)}
    ops = program.ops if hasattr(program, "ops") else program.nodes
    outputs = set(program.outputs)
    lines = [f'digraph "{name}" {{', '  rankdir=TB; bgcolor="transparent"; nodesep=0.25; ranksep=0.3;',
             '  node [fontname="Helvetica", fontsize=10, fontcolor="black", color="#57606a", penwidth=1];',
             f'  edge [color="{EDGE_COLOR}", arrowsize=0.6];']
    for b in program.buffers:
        lines.append(f'  "{b.name}" [shape=ellipse, style=filled, fillcolor="#ffffff", '
                     f'label="{_label(b.name, b.kind + " " + _type_text(b.type))}"];')
    for op in ops:
        ks = membership.get(op.name, ())
        fill = ":".join(color[k] for k in ks) or UNFUSED_FILL
        style = "filled,striped" if len(ks) > 1 else "rounded,filled"
        width = ", penwidth=2.5" if op.name in outputs else ""
        text = op.op if hasattr(program, "ops") else _op_text(op)
        # `add = add(...)`: the name says nothing the op does not, so it is printed once
        names = (text,) if op.name.rstrip("_0123456789") == text else (op.name, text)
        lines.append(f'  "{op.name}" [shape=box, style="{style}", fillcolor="{fill}"{width}, '
                     f'label="{_label(*names, _type_text(op.type))}", tooltip="{_label(str(op))}"];')
    for op in ops:
        inputs = [a for a in op.args if isinstance(a, str)] if hasattr(program, "ops") else list(op.inputs())
        for i in dict.fromkeys(inputs):
            lines.append(f'  "{i}" -> "{op.name}";')
    lines.append("}")
    return "\n".join(lines)


def render_svg(dot: str) -> str | None:
    """The SVG element dot draws, or None when `dot` is not installed or fails."""
    exe = shutil.which(DOT_BINARY)
    if exe is None:
        return None
    try:
        run = subprocess.run([exe, "-Tsvg"], input=dot.encode(), capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if run.returncode != 0:
        return None
    svg = run.stdout.decode("utf-8", "replace")
    svg = svg[svg.find("<svg"):]            # drop the XML prolog, doctype and version comment
    svg = "\n".join(line for line in svg.splitlines() if not line.lstrip().startswith("<!--"))
    svg = re.sub(r' class="[^"]*"', "", svg)       # inline styles only: no class a page's CSS could hit
    return svg


def legend(kernels: tuple[str, ...]) -> str:
    chips = [f'<span style="display: inline-block; margin: 2px 8px 2px 0;"><span style="display: inline-block; '
             f'width: 0.9em; height: 0.9em; background: {kernel_fill(i)}; border: 1px solid #57606a; '
             f'vertical-align: middle; margin-right: 4px;"></span><code>{esc(k)}</code></span>'
             for i, k in enumerate(kernels)]
    return f'<div style="color: {FG_DIM}; font-size: 0.9em;">kernels: {"".join(chips)}</div>'


def graph_html(program, stage: str, tensor=None, loop=None) -> str:
    """The program as a coloured dataflow graph, its text collapsible below; `tensor` and
    `loop` are the lowered programs when known (a Compilation's), else lowered here."""
    text = str(program)
    ops = program.ops if hasattr(program, "ops") else program.nodes
    n, word = len(ops), "op" if stage == "torch" else "node"
    heading = title(f"{'Torch' if stage == 'torch' else 'Tensor'} IR · {n} {word}{'' if n == 1 else 's'}")
    if len(ops) > MAX_GRAPH_NODES:
        return box(heading + note(f"graph omitted: {len(ops)} nodes (drawn up to {MAX_GRAPH_NODES})")
                   + highlight_html(text, stage))
    try:
        if loop is None:
            tensor, loop = lower_for_graph(program)
        membership = kernel_membership(tensor, loop)
        kernels = tuple(k.name for k in loop.kernels)
    except DeplokitError:    # a program fuse cannot take still draws, uncoloured
        membership, kernels = {}, ()
    if stage == "torch":    # an op lands where the Tensor-IR node holding its result does
        membership = {op.name: membership.get(op.name, ()) for op in ops}
    svg = render_svg(dot_source(program, membership, kernels, stage))
    if svg is None:
        return box(heading + note(INSTALL_NOTE) + highlight_html(text, stage))
    if len(ops) <= FIT_GRAPH_NODES:
        svg = svg.replace("<svg ", '<svg style="max-width: 100%; height: auto;" ', 1)
        frame = "overflow-x: auto;"
    else:
        frame = f"overflow: auto; max-height: 40em; border: 1px solid {BORDER};"
        heading += note(f"{len(ops)} nodes, drawn at full size: scroll the box to follow the graph")
    return box(heading + f'<div style="{frame}">{svg}</div>' + legend(kernels)
               + details("text", highlight_html(text, stage)))
