"""Numpy interpreter for Tensor IR: each node evaluated whole, in program order."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..ir.index import DIM_NAMES, evaluate
from ..ir.tensor_ir import Axis, Elementwise, IndexMap, Reduction, TensorProgram, Update
from .numpy_ops import NP_DTYPES, REDUCE, apply


def axis_grid(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Each output axis as a broadcastable arange, keyed by its index-variable name."""
    env = {}
    for d, e in enumerate(shape):
        s = [1] * len(shape)
        s[d] = e
        env[DIM_NAMES[d]] = np.arange(e, dtype=np.int64).reshape(s)
    return env


def run_tensor_ir(program: TensorProgram, env: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    vals = dict(env)
    for node in program.nodes:
        shape = node.type.shape
        if isinstance(node, Elementwise):
            args = []
            for a in node.args:
                if isinstance(a, str):
                    args.append(vals[a])
                elif isinstance(a, Axis):
                    args.append(axis_grid(shape)[DIM_NAMES[a.dim]])
                else:
                    args.append(a)
            out = np.broadcast_to(apply(node.op, args, node.type.dtype), shape)
        elif isinstance(node, Reduction):
            out = REDUCE[node.op](vals[node.src], axis=node.axes, keepdims=True)
        elif isinstance(node, IndexMap):
            out = gather_index_map(node, vals)
        elif isinstance(node, Update):   # in place: the state array itself changes
            state = vals[node.target]
            grid = axis_grid(node.src_shape)
            idx = np.broadcast_arrays(*[evaluate(e, grid, vals) for e in node.index], vals[node.src])
            state[tuple(idx[:-1])] = idx[-1]
            vals[node.name] = state
            continue
        else:  # pragma: no cover - the IR has three node kinds
            raise TypeError(node)
        # The node's own dtype, as the loop interpreter stores it (numpy would sum bools to
        # int64, or widen int arithmetic); reshape, as ascontiguousarray turns 0-d into (1,).
        vals[node.name] = np.ascontiguousarray(out, dtype=NP_DTYPES[node.type.dtype]).reshape(shape)
    return [vals[o] for o in program.outputs]


def gather_index_map(node: IndexMap, vals: Mapping[str, np.ndarray]) -> np.ndarray:
    src = vals[node.src]
    grid = axis_grid(node.type.shape)
    idx = [evaluate(e, grid, vals) for e in node.index]
    if node.pad is None:
        return np.broadcast_to(src[tuple(idx)], node.type.shape)
    ok = np.ones((), dtype=bool)
    for i, extent in zip(idx, src.shape):
        ok = ok & (i >= 0) & (i < extent)
    clipped = tuple(np.clip(i, 0, extent - 1) for i, extent in zip(idx, src.shape))
    out = np.where(ok, src[clipped], np.asarray(node.pad, dtype=src.dtype))
    return np.broadcast_to(out, node.type.shape)
