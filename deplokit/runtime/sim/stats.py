"""Counters returned by one simulated kernel launch."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SimStats:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    blocks: int = 0
    threads: int = 0                # threads launched (blocks * threads per block)
    chunks: int = 0
    statements: int = 0             # statements executed (once per chunk, not per thread)
    barriers: int = 0               # block-level __syncthreads executed
    global_bytes_loaded: int = 0    # by active threads
    loaded_by_buffer: dict = field(default_factory=dict)   # global bytes loaded from each parameter
    global_bytes_stored: int = 0
    global_loads: int = 0           # load instructions (ld, float4 ld, cp.async) of active threads:
    global_stores: int = 0          # a float4 counts once, so it shows 128-bit accesses at work
    shared_bytes_loaded: int = 0
    shared_bytes_stored: int = 0
    shared_load_wavefronts: int = 0  # wavefronts of the shared loads (runtime/sim/banks.py)
    shared_load_phases: int = 0      # ... were they conflict-free: the excess is bank conflicts
    float_multiplies: int = 0       # float `*` of active threads (each multiply-add of a contraction is one)

    def load(self, buffer: str, nbytes: int, loads: int) -> None:
        """Count `loads` global load instructions of `nbytes` in all from `buffer`."""
        self.global_bytes_loaded += nbytes
        self.global_loads += loads
        self.loaded_by_buffer[buffer] = self.loaded_by_buffer.get(buffer, 0) + nbytes
