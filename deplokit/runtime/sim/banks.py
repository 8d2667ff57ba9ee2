"""Shared-memory wavefronts of one simulated load: the bank conflicts of the layouts the
schedule chose, counted on the addresses the threads really use (deplokit/analysis/banks.py
predicts them from the Tile IR; the simulator measures them).

Shared memory is 32 banks of 4-byte words (word w in bank w % 32). A warp's load is served in
phases: 32 lanes for 4-byte loads, 16 for 8-byte, 8 for 16-byte (float4); a phase takes as
many wavefronts as the most distinct words one bank must deliver (lanes reading the same word
share a broadcast). A phase with no active lane takes none."""
from __future__ import annotations

import numpy as np

BANKS = 32
WARP = 32


def wavefronts(off, n: int, mask, shape) -> tuple[int, int]:
    """(wavefronts, phases with an active lane) of a load of `n` consecutive words at the
    per-thread offsets `off` (shape broadcastable to (blocks, threads)), `mask` the active
    threads (None: all). Their difference is the wavefronts bank conflicts cost."""
    nb, T = shape
    off = np.asarray(off, dtype=np.int64)
    rows = nb
    if mask is None and (off.ndim < 2 or off.shape[0] == 1):
        rows, scale = 1, nb                      # every block reads the same offsets
    else:
        scale = 1
    off = np.broadcast_to(off.reshape((1, -1) if off.ndim < 2 else off.shape), (rows, T))
    lanes = WARP // n if n in (1, 2, 4) else WARP
    pad = -T % lanes
    words = off[..., None] + np.arange(n)                                 # (rows, T, n)
    active = np.ones((rows, T), dtype=bool) if mask is None else np.broadcast_to(mask, (nb, T))[:rows]
    words = np.where(active[..., None], words, -1)
    if pad:
        words = np.concatenate([words, np.full((rows, pad, n), -1, dtype=np.int64)], axis=1)
    groups = words.reshape(-1, lanes * n)                                 # one row per phase
    srt = np.sort(groups, axis=1)
    first = np.ones_like(srt, dtype=bool)
    first[:, 1:] = srt[:, 1:] != srt[:, :-1]
    first &= srt >= 0                                                     # distinct, active words
    phase = np.broadcast_to(np.arange(len(srt))[:, None], srt.shape)
    per_bank = np.bincount((phase * BANKS + srt % BANKS)[first], minlength=len(srt) * BANKS)
    degree = per_bank.reshape(len(srt), BANKS).max(axis=1)
    return int(degree.sum()) * scale, int((degree > 0).sum()) * scale
