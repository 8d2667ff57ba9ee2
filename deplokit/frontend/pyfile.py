"""Load a program from a Python file.

The file defines two names:

    model   an nn.Module, or a function taking tensors and returning tensors
    inputs  a tuple of example input tensors, or a function returning one

for example

    import torch
    from torch import nn
    model = nn.RMSNorm(2048)
    inputs = (torch.randn(1, 32, 2048),)

The file runs as a script (after torch.manual_seed(0)), with the same trust as running it.
"""
from __future__ import annotations

import os
import runpy
import sys
import traceback

import torch

from ..errors import DeplokitError, ExpressionError
from .capture import argument_names
from .expression import Program
from .expression_eval import SEED


def load_file(path: str) -> Program:
    """Run the file at `path` and return its `model` and `inputs` as a Program."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ExpressionError(f"no such file: {path}")
    if not os.path.isfile(path):
        raise ExpressionError(f"{path} is not a file")
    abspath = os.path.abspath(path)
    rng = torch.random.get_rng_state()
    torch.manual_seed(SEED)
    sys.path.insert(0, os.path.dirname(abspath))
    try:
        namespace = runpy.run_path(abspath, run_name="__deplokit__")
        if "model" not in namespace:
            raise ExpressionError(f"{path} does not define `model` (an nn.Module or a function)")
        if "inputs" not in namespace:
            raise ExpressionError(f"{path} does not define `inputs` (a tuple of example tensors, "
                                  "or a function returning one)")
        model, inputs = namespace["model"], namespace["inputs"]
        if callable(inputs) and not isinstance(inputs, torch.Tensor):
            inputs = inputs()
    except DeplokitError:
        raise
    except SyntaxError as e:
        raise ExpressionError(f"{path}{_at(e.lineno, e.offset)}: SyntaxError: {e.msg}") from None
    except Exception as e:  # anything the file raises
        raise ExpressionError(f"{path}{_at(*_line_of(e, abspath))}: {_one_line(e)}") from None
    finally:
        sys.path.remove(os.path.dirname(abspath))
        torch.random.set_rng_state(rng)

    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ExpressionError(f"{path}: `inputs` must be a tuple of tensors (or a function returning one), "
                              f"got {_describe(inputs)}")
    if not (isinstance(model, torch.nn.Module) or callable(model)):
        raise ExpressionError(f"{path}: `model` must be an nn.Module or a function, got {type(model).__name__}")
    if isinstance(model, torch.nn.Module):
        model.eval()
    inputs = tuple(t.detach() for t in inputs)
    return Program(model, inputs, tuple(argument_names(model, len(inputs))), path)


def _describe(value) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of " + ", ".join(type(v).__name__ for v in value)
    return type(value).__name__


def _at(line, col=None) -> str:
    if line is None:
        return ""
    return f", line {line}, column {col}" if col else f", line {line}"


def _line_of(e: BaseException, abspath: str):
    line = None
    for frame in traceback.extract_tb(e.__traceback__):
        if os.path.abspath(frame.filename) == abspath:
            line = frame.lineno
    return (line,)


def _one_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__
