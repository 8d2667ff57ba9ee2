"""What one warp's memory access touches, read off the Tile IR: no GPU needed.

For a load or store of a scheduled kernel and one warp of block 0, every lane's address:

* a global access is served in 32-byte sectors: the lanes of a coalesced access share a
  few sectors (32 consecutive floats: 4), a column of a row-major matrix needs a sector
  per lane (32), so 7/8 of the bytes fetched are wasted;
* a shared-memory load is served by 32 banks of 4-byte words (word w in bank w % 32);
  distinct words in one bank are served one after another: the load takes as many
  wavefronts as the busiest bank has distinct words (analysis/banks.py).

A float4 access (005's vector loop) is one 16-byte access per lane; shared memory serves
it a quarter-warp (8 lanes, 128 bytes) at a time. The lanes are the THREAD axes flattened
row-major, as the materialiser numbers threads; loop variables are uniform across a warp
and taken at 0 (they shift every lane alike), register-loop variables at `slot` (0 by
default), a strided loop's variable at its thread's start. A vector loop's access is as wide
as the schedule stamped it (Load.shared_width, Load/Store.width); one stamped 1 is spelled
lane by lane, one access per value of the vector variable, taken at `slot` too. Bytes and
sectors are the same model the cost model prices (analysis/work.py); this module shows them lane by lane."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..display import Displayable
from ..errors import DeplokitError
from ..ir.index import evaluate, free_vars, gathers
from ..ir.loop_ir import Load, Loop, Store
from ..ir.stages import row_major_strides
from ..ir.tile_ir import AtomicAdd, Stage, StridedLoop, TileKernel, walk
from .banks import BANKS, WARP, conflict_degree, stage_word, thread_values
from .work import SECTOR


@dataclass(frozen=True)
class Access:
    """One load or store of a kernel, in the order the kernel's text lists them."""
    number: int
    kind: str               # global load | global store | atomic add | shared load
    tensor: str             # the global tensor, or the stage (shared array) read
    text: str               # the statement as Tile IR prints it
    width: int = 1          # elements per lane per access: the stamp of a vector loop's access (4: float4)


@dataclass(frozen=True)
class WarpAccess(Displayable):
    """One warp's lanes at one access. `addresses[i]`: the elements (global) or 4-byte words
    (shared) lane i touches; () for a lane the block does not have."""
    access: Access
    warp: int
    addresses: tuple[tuple[int, ...], ...]
    element_bytes: int = 4
    phase_lanes: int = WARP         # lanes served together in shared memory (8 for float4)
    label: str = ""                 # which schedule this is (two views side by side: "padded")

    @property
    def shared(self) -> bool:
        return self.access.kind == "shared load"

    # -- global: sectors ------------------------------------------------------------------------
    def sector_of(self, address: int) -> int:
        return address * self.element_bytes // SECTOR

    @property
    def sectors(self) -> tuple[int, ...]:
        """The distinct 32-byte sectors the warp touches, in address order."""
        return tuple(sorted({self.sector_of(a) for lane in self.addresses for a in lane}))

    @property
    def requested_bytes(self) -> int:
        """Bytes the lanes ask for (a word read by several lanes counts once)."""
        return len({a for lane in self.addresses for a in lane}) * self.element_bytes

    @property
    def efficiency(self) -> float:
        """Share of the fetched sector bytes the lanes use: 1.0 when coalesced."""
        fetched = len(self.sectors) * SECTOR
        return self.requested_bytes / fetched if fetched else 1.0

    # -- shared: banks --------------------------------------------------------------------------
    def bank_of(self, word: int) -> int:
        return word % BANKS

    @property
    def phases(self) -> tuple[tuple[int, ...], ...]:
        """Lane numbers served together: the whole warp, or quarter-warps for float4."""
        n = len(self.addresses)
        return tuple(tuple(range(p, min(p + self.phase_lanes, n))) for p in range(0, n, self.phase_lanes))

    def phase_degree(self, lanes) -> int:
        return conflict_degree([a for i in lanes for a in self.addresses[i]])

    @property
    def degree(self) -> int:
        """Wavefronts of the worst phase (1: conflict-free); sectors touched for a global access."""
        if not self.shared:
            return len(self.sectors)
        return max((self.phase_degree(p) for p in self.phases), default=0)

    def bank_words(self, lanes) -> dict[int, dict[int, tuple[int, ...]]]:
        """bank -> {word -> the lanes reading it}, for the lanes of one phase."""
        out: dict[int, dict[int, list[int]]] = {}
        for i in lanes:
            for a in self.addresses[i]:
                out.setdefault(self.bank_of(a), {}).setdefault(a, []).append(i)
        return {b: {w: tuple(ls) for w, ls in sorted(words.items())} for b, words in sorted(out.items())}

    def __str__(self) -> str:
        a = self.access
        head = (f"{self.label + ': ' if self.label else ''}access {a.number}: {a.kind} of {a.tensor}, "
                f"warp {self.warp} of block 0: {a.text.strip()}")
        unit = "word" if self.shared else "element"
        lines = [head]
        for i, lane in enumerate(self.addresses):
            if not lane:
                continue
            where = (", ".join(f"bank {self.bank_of(w)}" for w in lane) if self.shared
                     else ", ".join(f"sector {self.sector_of(e)}" for e in lane))
            lines.append(f"  lane {i:2d}: {unit} {', '.join(str(x) for x in lane)}  ({where})")
        lines.append(summary(self))
        return "\n".join(lines)


def summary(w: WarpAccess) -> str:
    """One line: what the access costs and why."""
    if w.shared:
        d = w.degree
        vector = "float4" if w.access.width == 4 else f"{w.access.width * w.element_bytes}-byte"
        per = "" if w.phase_lanes == WARP else f" ({vector}: served {w.phase_lanes} lanes at a time)"
        verdict = "conflict-free" if d <= 1 else f"{d}-way bank conflict, {d} wavefronts instead of 1"
        return f"shared memory{per}: {verdict}"
    n = len(w.sectors)
    return (f"{w.requested_bytes} bytes asked, {n} sector{'' if n == 1 else 's'} of 32 bytes fetched "
            f"({n * SECTOR} bytes): {w.efficiency:.0%} of the fetched bytes used"
            + (" (coalesced)" if w.efficiency >= 0.999 else ""))


def accesses(kernel: TileKernel, types: dict) -> tuple[Access, ...]:
    """Every global load, store and atomic add and every shared-memory load of the kernel."""
    tile = kernel.tile()
    stages = {s.name for s, _ in walk(tile.body) if isinstance(s, Stage)}
    out = []
    for s, loops in walk(tile.body):
        width = _vector_width(s, loops, getattr(s, "tensor", None) in stages)
        if isinstance(s, Load) and s.tensor in stages:
            kind = "shared load"
        elif isinstance(s, Load) and s.tensor in types:
            kind = "global load"
        elif isinstance(s, Store) and s.tensor in types:
            kind = "global store"
        elif isinstance(s, AtomicAdd):
            kind = "atomic add"
        else:
            continue                # register arrays, locals
        out.append(Access(len(out), kind, s.tensor, s.text(), width))
    return tuple(out)


def _vector_width(s, loops, shared: bool) -> int:
    """Elements one lane moves per access, as the schedule stamped it and the lowering reads
    it: a lane-dependent access of a vector loop is Load.shared_width wide in shared memory,
    Load/Store.width in global memory; 1 (lane by lane) otherwise."""
    index = getattr(s, "index", ())
    if not isinstance(s, (Load, Store)) or not any(
            isinstance(lp, Loop) and lp.kind == "vector" and any(lp.var in free_vars(e) for e in index)
            for lp in loops):
        return 1
    return s.shared_width if shared else s.width


def warp_access(kernel: TileKernel, types: dict, access: int | str = 0, warp: int = 0,
                slot: dict | None = None) -> WarpAccess:
    """Warp `warp` of block 0 at access number `access` (or the first access of a tensor or
    stage by that name). `slot`: register-loop (or lane-by-lane vector-loop) variable -> value
    (0 for the others)."""
    found = accesses(kernel, types)
    if isinstance(access, str):
        match = [a for a in found if a.tensor == access]
        if not match:
            raise DeplokitError(f"kernel {kernel.name} has no access to {access!r}; "
                                f"it accesses {', '.join(sorted({a.tensor for a in found})) or 'nothing'}")
        target = match[0]
    elif 0 <= access < len(found):
        target = found[access]
    else:
        raise DeplokitError(f"kernel {kernel.name} has accesses 0..{len(found) - 1}, not {access}")
    tile = kernel.tile()
    lanes = thread_values(tile)
    threads = len(next(iter(lanes.values()))) if lanes else 1
    warps = -(-threads // WARP)
    if not 0 <= warp < warps:
        raise DeplokitError(f"kernel {kernel.name} has warps 0..{warps - 1} per block, not {warp}")
    lo, hi = warp * WARP, min((warp + 1) * WARP, threads)
    env: dict = {v: vals[lo:hi] if lanes else np.int64(0) for v, vals in lanes.items()}
    stages = {s.name: s for s, _ in walk(tile.body) if isinstance(s, Stage)}
    stmt, loops = [(s, lp) for s, lp in walk(tile.body)
                   if isinstance(s, (Load, Store, AtomicAdd)) and s.text() == target.text][0]
    if any(gathers(e) for e in stmt.index):
        raise DeplokitError(f"access {target.number} ({target.text.strip()}) reads rows chosen by data: "
                            "its addresses are not known before it runs")
    for lp in loops:
        if isinstance(lp, Loop) and lp.kind == "vector" and target.width > 1:
            env[lp.var] = np.arange(target.width, dtype=np.int64)[:, None]
        elif isinstance(lp, Loop) and lp.kind == "vector":     # lane by lane: one access per value
            env[lp.var] = np.int64((slot or {}).get(lp.var, 0))
        elif isinstance(lp, Loop):
            env[lp.var] = np.int64((slot or {}).get(lp.var, 0) if lp.kind == "register" else 0)
        elif isinstance(lp, StridedLoop):
            env[lp.var] = evaluate(lp.start, _filled(env, lp.start))
    n = hi - lo
    values = [np.broadcast_to(np.asarray(evaluate(e, _filled(env, e)), dtype=np.int64),
                              (target.width, n) if target.width > 1 else (n,)) for e in stmt.index]
    if target.kind == "shared load":
        flat = stage_word(stages[stmt.tensor], values)
        size = 4
    else:
        t = types[stmt.tensor]
        flat = sum((v * s for v, s in zip(values, row_major_strides(t.shape))), np.int64(0))
        size = t.itemsize
    flat = np.broadcast_to(np.asarray(flat, dtype=np.int64), (target.width, n) if target.width > 1 else (n,))
    per_lane = flat.T.reshape(n, -1) if target.width > 1 else flat.reshape(n, 1)
    addresses = tuple(tuple(int(a) for a in row) for row in per_lane) + ((),) * (WARP - n)
    return WarpAccess(target, warp, addresses, size, WARP // target.width if target.kind == "shared load" else WARP)


def _filled(env: dict, e) -> dict:
    """env with any variable of e it lacks (block-uniform) taken at 0."""
    missing = free_vars(e) - env.keys()
    return {**env, **{v: np.int64(0) for v in missing}} if missing else env


def memory_access(compilation, access: int | str = 0, kernel: str | None = None, warp: int = 0,
                  slot: dict | None = None, label: str = "") -> WarpAccess:
    """warp_access on a Compilation's Tile IR; `kernel` by name, the first by default; `label`
    heads the view (which of two schedules shown side by side this one is)."""
    tile = compilation.tile_ir
    names = [k.name for k in tile.kernels]
    if not names:
        raise DeplokitError("this program has no kernel")
    if kernel is not None and kernel not in names:
        raise DeplokitError(f"no kernel {kernel!r}; kernels: {', '.join(names)}")
    w = warp_access(tile.kernel(kernel or names[0]), tile.types(), access, warp, slot)
    return dataclasses.replace(w, label=label) if label else w
