"""Evaluating `-c` text once (expression.py plans it): the factories and the constants it
marks are instrumented, run after torch.manual_seed(SEED), and their values recorded; a
failure in the user's code is an ExpressionError naming its line and column."""
from __future__ import annotations

import ast
import builtins
import copy
import traceback

import torch

from ..errors import DeplokitError, ExpressionError
from .size_guard import NeedsValues, size_guard

SEED = 0
FILENAME = "<expression>"

# torch.<name>(...) calls whose result is an input of the program.


def scope() -> dict:
    """The globals `-c` text is evaluated in."""
    return {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "__builtins__": builtins}


def position(line, col=None) -> str:
    if line is None:
        return ""
    return f" at line {line}, column {col}" if col else f" at line {line}"


def node_position(node: ast.AST) -> str:
    return position(node.lineno, node.col_offset + 1)


def evaluate_once(tree: ast.Module, text: str):
    """Run the text once with factories and constants instrumented; return their values.

    The inputs and constants need their values; what depends on an input needs only its
    shape (torch.export captures it later), so it is first evaluated on meta tensors. Where
    that cannot work (an op without a meta kernel, a factory shaped like an input, an error
    in the user's code, whose message should be eager's) it is evaluated again, eagerly."""
    try:
        return _evaluate(tree, text, shapes_only=True)
    except NeedsValues:
        return _evaluate(tree, text, shapes_only=False)


def _evaluate(tree: ast.Module, text: str, shapes_only: bool):
    values = {"input": {}, "const": {}}
    where = {}

    def hook(kind):
        def record(k, value):
            if k in values[kind]:
                raise ExpressionError(f"the {'tensor factory' if kind == 'input' else 'subexpression'} at "
                                      f"{where[kind, k]} is evaluated more than once; deplokit evaluates "
                                      "each input and constant once")
            is_input = kind == "input" and isinstance(value, torch.Tensor)
            if shapes_only and isinstance(value, torch.Tensor) and value.is_meta:
                raise NeedsValues("made from an input's meta stand-in (torch.rand_like(x), ...)")
            # Keep the example input as created: later statements may update it in place.
            values[kind][k] = value.detach().clone() if is_input else value
            if shapes_only and is_input:
                return value.detach().to("meta")   # what depends on it is shape-checked only
            return value
        return record

    wrapped = _Instrument(where).visit(copy.deepcopy(tree))
    last = wrapped.body[-1]
    wrapped.body[-1] = ast.copy_location(
        ast.Assign(targets=[ast.Name("_dk_result", ast.Store())], value=last.value), last
    )
    ast.fix_missing_locations(wrapped)
    env = scope()
    env["_dk_input"], env["_dk_const"] = hook("input"), hook("const")
    code = compile(wrapped, FILENAME, "exec")
    rng = torch.random.get_rng_state()
    torch.manual_seed(SEED)
    try:
        with torch.no_grad(), size_guard(shapes_only):   # a result too large to compile is refused unmade
            exec(code, env)
    except (DeplokitError, NeedsValues):
        raise
    except Exception as e:  # anything the user's code raises
        if shapes_only:
            raise NeedsValues(type(e).__name__) from None   # report it as the eager evaluation words it
        raise ExpressionError(_runtime_message(e)) from None
    finally:
        torch.random.set_rng_state(rng)

    for (kind, k), pos in sorted(where.items()):
        if k not in values[kind]:
            raise ExpressionError(f"the {'tensor factory' if kind == 'input' else 'subexpression'} at {pos} "
                                  "is never evaluated; deplokit needs every input and constant evaluated once")
    final = tree.body[-1].value
    result = env["_dk_result"]
    leaves = torch.utils._pytree.tree_leaves(result)
    if isinstance(result, torch.nn.Module) or not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
        hint = ("; it is a module: call it on an input, e.g. nn.RMSNorm(8)(torch.randn(2, 8))"
                if isinstance(result, torch.nn.Module) else "")
        raise ExpressionError(f"the expression{node_position(final)} evaluates to {type(result).__name__}, "
                              f"not a tensor{hint}")
    for k, v in values["input"].items():
        if not isinstance(v, torch.Tensor):
            raise ExpressionError(f"the tensor factory at {where['input', k]} returned "
                                  f"{type(v).__name__}, not a tensor")
    return values["input"], values["const"], env


class _Instrument(ast.NodeTransformer):
    """Factory -> _dk_input(k, factory); constant -> _dk_const(k, constant)."""

    def __init__(self, where):
        self.where = where

    def visit(self, node):
        mark = getattr(node, "_dk", None)
        if mark is None:
            return super().visit(node)
        self.where[mark] = f"line {node.lineno}, column {node.col_offset + 1}"
        hook = ast.Name("_dk_input" if mark[0] == "input" else "_dk_const", ast.Load())
        return ast.copy_location(ast.Call(func=hook, args=[ast.Constant(mark[1]), node], keywords=[]), node)


def _runtime_message(e: Exception) -> str:
    line = col = None
    for frame in traceback.extract_tb(e.__traceback__):
        if frame.filename == FILENAME:
            line, col = frame.lineno, getattr(frame, "colno", None)
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    what = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
    hint = "; torch, nn (torch.nn) and F (torch.nn.functional) are in scope" if isinstance(e, NameError) else ""
    return f"could not evaluate expression{position(line, None if col is None else col + 1)}: {what}{hint}"
