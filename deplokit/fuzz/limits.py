"""The fuzzer's shape limits (sizes the simulator runs in well under a second) and helpers."""
from __future__ import annotations

# Odd extents: 1, warp +-1, block +-1.
ODD = (1, 3, 31, 33, 127, 129, 1000)
MAX_NUMEL = 40_000          # elements of any one value (simulator time) ...
MAX_MATMUL = 600_000        # M * N * K of a generated matmul


def dim(rng, shape):
    return rng.randrange(len(shape)) if shape else None


def numel(shape) -> int:
    n = 1
    for e in shape:
        n *= e
    return n


def broadcast_shape(rng, shape) -> tuple[int, ...]:
    """A shape that broadcasts against `shape`: some extents 1, some leading dims dropped."""
    return tuple(1 if rng.random() < 0.3 else e for e in shape)[rng.randrange(len(shape) + 1):] if shape else ()
