"""Numpy meaning of every Tensor-IR / Loop-IR elementwise op, shared by both interpreters.

Arithmetic stays in float32 (scalars are cast first so numpy never widens to float64)."""
from __future__ import annotations

import numpy as np

F32 = np.float32


def _erf(x):
    # Abramowitz & Stegun 7.1.26 in float64: |error| < 1.5e-7, below float32 resolution of erf.
    x64 = np.asarray(x, dtype=np.float64)
    s = np.sign(x64)
    a = np.abs(x64)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-a * a)
    return (s * y).astype(F32)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return (F32(1) / (F32(1) + np.exp(-x))).astype(F32)


def _where(c, a, b):
    return np.where(np.asarray(c, dtype=bool), a, b)


OPS = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: F32(1) / np.sqrt(x), "reciprocal": lambda x: F32(1) / x,
    "tanh": np.tanh, "erf": _erf, "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, F32(0)),
    "sin": np.sin, "cos": np.cos, "logical_not": np.logical_not,
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "pow": np.power,
    "greater": np.greater, "less": np.less, "greater_equal": np.greater_equal,
    "less_equal": np.less_equal, "equal": np.equal, "not_equal": np.not_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
    "where": _where,
}

REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


def apply(op: str, args: list):
    args = [F32(a) if isinstance(a, float) else a for a in args]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = OPS[op](*args)
    if isinstance(out, np.ndarray) and out.dtype == np.float64:
        out = out.astype(F32)
    return out
