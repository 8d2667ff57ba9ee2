"""A matmul's block shape: how many threads run along M and N (005's `thread_shape` knob) and
how many outputs each thread owns (008's `tm`, `tn`), with the defaults both passes (and
003, which predicts the grid before it exists) derive from M, N and the SM count.

The shared-memory loads of a thread's K loop are TM/4 + TN/4 LDS.128 per k (A read along k,
4 steps merged; B in quads) for TM * TN FFMA: a larger register block is cheaper per FFMA.
So the thread shape is chosen for the register block it allows: a narrow M (32 tokens)
with 16 threads along M leaves 2 rows per thread (0.16 LDS per FFMA), with 8 threads 4 rows
(0.125). Among the shapes of at least 128 threads (4 warps: latency cover) and at most 16 along
either axis the one whose
default register block costs the fewest shared loads per FFMA wins; ties go to the shape
whose grid puts more warps on the SMs (up to 8 each), then to more threads, then to the order of THREAD_SHAPES
(16 x 16 first: the article's). An output too small for 128 threads takes the most threads
its axes allow (blockify gives an axis no more threads than its extent rounded up to 2^k)."""
from __future__ import annotations

from .knobs import pow2_at_least

THREAD_SHAPES = ("16x16", "8x16", "16x8", "8x32", "32x8", "4x32", "32x4", "8x8", "4x16", "16x4")
EXTENTS = (1, 2, 4, 8)
MIN_DEFAULT_THREADS = 128
MAX_DEFAULT_SIDE = 16      # 32 lanes along one axis put an operand's rows of [n][k] (nn.Linear's
                           # weight) 4 rows apart per lane: 4-way conflicts, and ptxas spills under
                           # 009's rotation; the tuner may still pick 8 x 32 or 32 x 8


def parse_shape(shape: str) -> tuple[int, int]:
    """"8x32" -> (8, 32): threads along M, threads along N."""
    m, n = shape.split("x")
    return int(m), int(n)


def default_extent(size: int, threads: int = 16) -> int:
    """Register-block extent along an output axis of `size` elements (`threads` threads
    cover it): the largest of 1, 2, 4, 8 whose block tile (threads * extent) the axis fills,
    so no block row or column is padding; axes under 2 * threads keep one output per thread."""
    e = 1
    while e < EXTENTS[-1] and threads * e * 2 <= size:
        e *= 2
    return e


def default_extents(size_m: int, size_n: int, sm_count: int, threads: tuple[int, int] = (16, 16)) -> tuple[int, int]:
    """(TM, TN): each axis's largest extent, then the larger of them halved while twice
    the blocks still fit on the SMs one each: an 8 x 8 block (64 FFMA per 16 bytes of
    shared loads) keeps the K loop FFMA-bound, but with b blocks on more than 2b SMs,
    halving the block finishes in half the time. Past that, some SM runs two half blocks,
    as long as one whole one, in a less efficient loop. A thread keeps at least 16 outputs
    (below that its K loop is bound by shared loads, not FFMA): a grid still too small is
    003's to fill, by splitting K."""
    t_m, t_n = threads
    tm, tn = default_extent(size_m, t_m), default_extent(size_n, t_n)
    while 2 * blocks_of(size_m, size_n, threads, (tm, tn)) <= sm_count and tm * tn >= 32:
        if tn >= tm:
            tn //= 2
        else:
            tm //= 2
    return tm, tn


def blocks_of(size_m: int, size_n: int, threads: tuple[int, int], regs: tuple[int, int]) -> int:
    """Blocks a size_m x size_n output takes in block tiles of threads * regs."""
    return -(-size_m // (threads[0] * regs[0])) * -(-size_n // (threads[1] * regs[1]))


def loads_per_ffma(regs: tuple[int, int]) -> float:
    """LDS.128 per FFMA of a TM x TN register block (a scalar load per slot under 4)."""
    tm, tn = regs
    return (max(tm / 4, 1 if tm < 4 else 0) + max(tn / 4, 1 if tn < 4 else 0)) / (tm * tn)


def default_thread_shape(size_m: int, size_n: int, sm_count: int) -> str:
    """The thread shape (a THREAD_SHAPES entry) for a size_m x size_n output: see the module."""
    shapes = [s for s in THREAD_SHAPES if max(parse_shape(s)) <= MAX_DEFAULT_SIDE]
    fitted = [fitted_threads(parse_shape(shape), size_m, size_n) for shape in shapes]
    least = min(MIN_DEFAULT_THREADS, max(t[0] * t[1] for t in fitted))    # small outputs: what they allow
    best, best_key = shapes[0], None
    for order, (shape, t) in enumerate(zip(shapes, fitted)):
        if t[0] * t[1] < least:
            continue
        regs = default_extents(size_m, size_n, sm_count, t)
        blocks = blocks_of(size_m, size_n, t, regs)
        warps = blocks * t[0] * t[1] // 32
        key = (round(loads_per_ffma(regs), 6), -min(warps, sm_count * 8), -t[0] * t[1], order)
        if best_key is None or key < best_key:
            best, best_key = shape, key
    return best


def fitted_threads(threads: tuple[int, int], size_m: int, size_n: int) -> tuple[int, int]:
    """Threads blockify gives each axis: all of an axis its threads cover, else `threads`."""
    return tuple(size if pow2_at_least(size) <= t else t for t, size in zip(threads, (size_m, size_n)))
