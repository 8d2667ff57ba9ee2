"""Tile IR: a Loop-IR kernel scheduled onto the GPU.

    === merged_rms_norm -> rms_norm ===
    Tile(axes=(a0:256=THREAD, a1:32=BLOCK)):
        x_smem = Stage(x, origin=(0, a1, 0), slab=(a2:2048@2))
        StridedLoop(a2 = a0; < 2048; += 256):  # reduce
            in0 = load x_smem[a2]
            v0 = multiply(in0, in0)
            acc0 <- add(acc0, v0)
        Combine(acc0, add, over=(a0,))
        ...

A Tile runs its body once for every value of its axes: THREAD axes are the threads of one
block, BLOCK axes the blocks of the grid. Inside, Loop IR's statements (load, compute,
accumulate, store, serial loops) keep their meaning; the new nodes say how threads share
work and memory:

- StridedLoop: a loop whose iterations are dealt out to threads (start at the thread's
  index, step by the thread count).
- Combine: after a strided reduce each thread holds a partial accumulator; Combine merges
  them across the given THREAD axes so that every thread holds the total.
- Stage: a slab of a global tensor copied into shared memory by all the block's threads;
  loads from the slab read the copy. BufferedStage double-buffers a stage inside a loop.
  A stage copied asynchronously (AsyncStage / AsyncBufferedStage: cp.async; TmaBufferedStage:
  a TMA tensor-map copy) only issues its copies, in flight until an AsyncWait names the stage.
- AsyncWait(a_smem, b_smem): the point where the listed stages' asynchronous copies have
  landed and are visible to every thread of the block (the materialiser waits for them,
  cp.async.wait_group 0 / mbarrier wait, then puts a block barrier where copies some threads
  made must become visible to the others, or a buffer is refilled next). 013 async_copy and 011
  tma_copy put it right after the group of stages they made asynchronous; 015
  pipeline_k_outer moves it before the prefetching stages of a K-outer loop, so that the
  body reads in execution order (below): wait for tile ko, issue the copies of tile ko + 1,
  compute tile ko.

      for a2o in 0..4:  # reduce (K)
          AsyncWait(x_smem, bias_smem, w_smem)
          x_smem = AsyncBufferedStage(x, origin=(0, a2o * 16), slab=(a0:16@0, a2i:16@1), prefetch=1)
          bias_smem = AsyncBufferedStage(bias, origin=(a2o * 16), slab=(a2i:16@0), prefetch=1)
          w_smem = AsyncBufferedStage(w, origin=(a2o * 16, 0), slab=(a2i:16@0, a1:16@1), prefetch=1)
          for a2i in 0..16:  # reduce (K)
              in0 = load x_smem[a0, a2i]
              ...

THREAD axes flatten row-major into the block's thread index (the last THREAD axis is the
fastest, threadIdx.x), BLOCK axes likewise into the grid's block index.

Register tiles (008 register_tile) let one thread own a TM x TN block of a matmul's outputs:

    register acc0[2, 4]
    Tile(axes=(a0t(M):16=THREAD, a1t(N):16=THREAD, a0b(M):2=BLOCK, a1b(N):4=BLOCK)):
        for a2o in 0..8:  # reduce (K)
            a_smem = Stage(a, origin=(a0b * 32, a2o * 16), slab=(a0:32@0, a2i:16@1))
            b_smem = Stage(b, origin=(a2o * 16, a1b * 64), slab=(a2i:16@0, a1:64@1))
            for a2i in 0..16:  # reduce (K)
                for a0r in 0..2:  # register (M) unroll
                    in0 = load a_smem[a0r * 16 + a0t, a2i]
                    for a1r in 0..4:  # register (N) unroll
                        in1 = load b_smem[a2i, a1r * 16 + a1t]
                        v0 = multiply(in0, in1)
                        acc0[a0r, a1r] <- add(acc0[a0r, a1r], v0)
        for a0r in 0..2:  # register (M) unroll
            for a1r in 0..4:  # register (N) unroll
                acc0_v = load acc0[a0r, a1r]
                matmul[a0b * 32 + a0r * 16 + a0t, a1b * 64 + a1r * 16 + a1t] = acc0_v

- A Loop of kind `register` is a loop over a thread's register block: each iteration is
  the same thread working on another output of its block, and the loop is always fully
  unrolled (its variable is a compile-time constant in every copy, so arrays it indexes
  live in registers). Register loops carry the role (M or N) of the output axis they tile.
- An accumulator written with an index (`acc0[a0r, a1r] <- ...`) is a per-thread register
  array (its shape stamped on the kernel by 008, `register acc0[2, 4]` under the header)
  with one element per value of the enclosing register loops, every element starting
  at the reduction's identity where a scalar accumulator would; `load acc0[a0r, a1r]` reads
  one element back (after the reduce, in the epilogue).
- Which output a register slot computes is spelled out in the indices: above, slot
  (a0r, a1r) of thread (a0t, a1t) is element (a0b*32 + a0r*16 + a0t, a1b*64 + a1r*16 + a1t),
  a strided layout (a warp's 16 N-threads read 16 consecutive floats for every slot).
  009 permute_register_tile may make the slot -> column map depend on the thread.

A Loop of kind `vector` (005 blockify_launch) runs its body for 4 consecutive elements of
the contiguous innermost axis in one thread; the materialiser spells each of its loads and
stores as one 128-bit float4 access where alignment allows (deplokit.passes.vector_geometry);
005 stamps the decision on each access (`# float4`, Load.width / Store.width 4):

    Tile(axes=(a1t:256=THREAD, a0:4096=BLOCK, a1b:4=BLOCK)):
        for a1v in 0..4:  # vector
            in0 = load x0[a0, a1b * 1024 + a1t * 4 + a1v]  # float4
            ...

A grouped matmul's tile axis has role G (fusion gives it to a batch axis that picks an
operand through a gather, `w[expert[p], k, n]`): 005 makes it a BLOCK axis of one tile per
block (`a0(G):15=BLOCK`), so the gather is uniform over the block and 007 stages its operand
as a box whose origin reads it (`origin=(gmm_slot_expert[a0], a3o * 16, a2b * 32)`); the
lowering loads such an integer once, at the kernel's start (docs/moe.md).

Split-K (003 split_matmul_k) adds a BLOCK axis of role K (`a2s(K):8=BLOCK`): each block
reduces one contiguous range of K chunks and stores its partial sum into its own slice of a
workspace (`matmul_partials[a2s, ...] = acc0`); a second kernel, which 003 adds just after,
sums the slices in a fixed order and applies the epilogue once (`split-K 8 into
matmul_partials, reduced by matmul_reduce`, TileKernel.split_k). Or (reduce=in_kernel) the
split kernel reduces them itself: a `SplitArrive` (ir/companions.py) after the partial store
lets only the last block of each output tile through, which adds the slices in split order.

On tensor cores (008's mma knob) a register tile's multiply-adds become FragmentLoad, MmaSync
or WarpgroupMma statements (ir/tile_mma.py) under the kernel's MmaTile (ir/fragments.py).

A kernel's locals (Loop IR's `local ...` lines, printed under its header too) are tensors it keeps on chip one row
at a time, in shared memory once materialised (passes/lower/local_rows.py). A store or load whose index can leave
its tensor (an axis rounded up to whole blocks) is guarded when materialised; the Tile IR does not spell guards out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..display import Displayable
from .companions import Repack, SplitArrive, SplitK  # noqa: F401  (TileKernel.split_k, .repacks; re-exported)
from .fragments import MmaTile
from .index import Affine, format_index, free_vars
from .loop_ir import Accumulate, Assign, Compute, Load, LocalBuffer, Loop, Store, format_loop_operand  # noqa: F401  (Loop IR's statements)
from .swizzle import TmaBox  # noqa: F401  (Stage.tma; re-exported)
from .tile_mma import FragmentLoad, MmaSync, WarpgroupMma  # tensor cores' statements (008's mma, wgmma)
from .types import Buffer, format_header
from .warp_roles import WarpRoles

THREAD, BLOCK = "THREAD", "BLOCK"


@dataclass(frozen=True)
class TileAxis:
    var: str
    extent: int
    kind: str                      # THREAD | BLOCK
    role: str = ""                 # M or N in a matmul-like kernel; G: one grouped-matmul tile per block

    def __str__(self) -> str:
        role = f"({self.role})" if self.role else ""
        return f"{self.var}{role}:{self.extent}={self.kind}"


@dataclass(frozen=True)
class Tile:
    axes: tuple[TileAxis, ...]
    body: tuple["TileStmt", ...]

    def text(self) -> str:
        return f"Tile(axes=({', '.join(str(a) for a in self.axes)})):"

    def axis(self, var: str) -> TileAxis:
        for a in self.axes:
            if a.var == var:
                return a
        raise KeyError(var)


@dataclass(frozen=True)
class StridedLoop:
    var: str
    start: Affine                  # usually the thread's index along a THREAD axis
    stop: int
    step: int                      # usually that axis's extent
    kind: str                      # free | reduce
    body: tuple["TileStmt", ...]
    role: str = ""
    unroll: bool = False

    def text(self) -> str:
        role = f" ({self.role})" if self.role else ""
        unroll = " unroll" if self.unroll else ""
        return f"StridedLoop({self.var} = {self.start}; < {self.stop}; += {self.step}):  # {self.kind}{role}{unroll}"


@dataclass(frozen=True)
class Combine:
    acc: str
    reduction: str                 # sum | max | min; gather (with slots: the inverse of a scatter)
    over: tuple[str, ...]          # THREAD axis vars whose threads hold partials
    # slots > 0: acc is a register tile of that many partials and the lanes transpose it (a
    # reduce-scatter): afterwards lane l's slots 0 .. slots/L - 1 hold the full reductions of
    # slots l * slots/L + i; `gather` undoes it (every lane gets every lane's slots back)
    slots: int = 0

    def text(self) -> str:
        op = {"sum": "add", "max": "max", "min": "min", "gather": "gather"}[self.reduction]
        tile = f", scatter {self.slots} slots" if self.slots and self.reduction != "gather" else \
            (f", {self.slots} slots" if self.slots else "")
        return f"Combine({self.acc}, {op}, over=({', '.join(self.over)},){tile})"


@dataclass(frozen=True)
class SlabAxis:
    var: str                       # the variable the slab is indexed by
    extent: int
    dim: int                       # the tensor dimension it runs along

    def __str__(self) -> str:
        return f"{self.var}:{self.extent}@{self.dim}"


@dataclass(frozen=True)
class StagedPrologue:
    """An elementwise function applied to each slab element between its global loads and its
    shared store (007: SwiGLU's silu(gate) * up staged as the A operand of down_proj):
    `inputs[i]` is read at the stage's origin + slab element into `params[i]`, `body` computes
    from them, the stage holds `result` (float32). The inputs share the stage tensor's shape.
    cp.async and TMA copy bytes as they are: such a stage is copied through registers."""
    inputs: tuple[str, ...]
    params: tuple[str, ...]
    body: tuple[Compute, ...]
    result: str

    def text(self) -> str:
        reads = ", ".join(f"{p} = {t}" for p, t in zip(self.params, self.inputs))
        return f"prologue({reads}; {'; '.join(c.text() for c in self.body)})"


@dataclass(frozen=True)
class Stage:
    """name[slab] = tensor[origin + slab] in shared memory, for the rest of the scope.

    How the copy is made: `copy` sync (the block's threads load and store, float4 where the
    rows allow, visible after a barrier), async (cp.async, 16 or 4 bytes) or tma (one
    tensor-map copy of the slab as a box by one thread: TmaBox); an asynchronous copy is
    only issued here, and lands at the AsyncWait that names the stage. `buffers` N >= 2
    (BufferedStage, first in a K-outer loop; stages=N above 2): a ring, iteration ko fills
    slot ko % N and computes from it. `prefetch` N - 1 (015 pipeline_k_outer): the copy of
    tile ko + N - 1 is issued during iteration ko (the first N - 1 before the loop), so it
    overlaps the compute before it; the AsyncWait before the stage waits for tile ko."""
    name: str
    tensor: str
    origin: tuple[Affine, ...]     # the slab's first element, per tensor dimension
    slab: tuple[SlabAxis, ...]
    pad: int = 0                   # extra elements after each row of the innermost slab axis
    copy: str = "sync"             # sync | async (cp.async) | tma
    buffers: int = 1               # N >= 2: a ring of N buffers inside a K loop (2 = ping-pong)
    prefetch: int = 0              # d >= 1: issued d K-outer iterations ahead (software pipeline)
    tma: TmaBox | None = None      # the tensor-map copy (011) and its swizzle (012)
    unit: int = 1                  # elements per unit the threads copy: 16 bytes (float4 / cp.async 16) or 1 (007)
    prologue: StagedPrologue | None = None   # applied on the way in (007): a register-staged copy
    # the element type held in shared memory: float32 (a half tensor converted as it is
    # copied), or the tensor's own half type where 008's tensor-core path reads it raw
    # (2 bytes an element: pad, units and 16-byte rows count halves)
    dtype: str = "float32"

    @property
    def element_bytes(self) -> int:
        return 2 if self.dtype in ("bfloat16", "float16") else 4

    @property
    def vector(self) -> int:
        """Elements in 16 bytes: a float4 / 16-byte cp.async / ldmatrix row."""
        return 16 // self.element_bytes

    def text(self) -> str:
        kind = "Stage" if self.buffers == 1 else "BufferedStage"
        if self.copy == "async":
            kind = "Async" + kind
        elif self.copy == "tma":
            kind = "Tma" + kind
        extra = f", stages={self.buffers}" if self.buffers > 2 else ""
        extra += f", pad={self.pad}" if self.pad else ""
        extra += f", {self.tma.text()}" if self.tma else ""
        extra += f", prefetch={self.prefetch}" if self.prefetch else ""
        extra += f", {self.dtype}" if self.dtype != "float32" else ""
        extra += f", {self.prologue.text()}" if self.prologue else ""
        return (f"{self.name} = {kind}({self.tensor}, origin=({format_index(self.origin)}), "
                f"slab=({', '.join(str(s) for s in self.slab)}){extra})")

    @property
    def size(self) -> int:
        n = 1
        for s in self.slab:
            n *= s.extent
        return n


@dataclass(frozen=True)
class AsyncWait:
    """The asynchronous copies of the listed stages (cp.async or TMA) have landed and are
    visible to every thread of the block: loads from those stages may follow.

    Right after the stages' group (011 tma_copy, 013 async_copy) it waits for the copies
    just issued. Before the prefetching stages of a K-outer loop (015 pipeline_k_outer) it
    waits for the copies of tile ko, issued one iteration earlier (the first before the
    loop), and its barrier also tells that every thread is done reading the buffer the
    stages after it refill. The materialiser emits cp.async.wait_group 0 (cp.async stages),
    an mbarrier wait (TMA stages: each waiting thread sees the bytes) and a block barrier
    (copies made by the threads, a refill next) here; see deplokit.passes.lower.k002_stage_copies.
    A stage copied asynchronously that no AsyncWait names is an error when materialised."""
    stages: tuple[str, ...]        # names of the stages waited for
    # 015's producer/consumer schedule of the ring (ir/warp_roles.py); None: the computing
    # threads issue the copies themselves
    roles: WarpRoles | None = None

    def text(self) -> str:
        roles = f"; {self.roles.text()}" if self.roles else ""
        return f"AsyncWait({', '.join(self.stages)}{roles})"


TileStmt = Union[Tile, StridedLoop, Combine, Stage, AsyncWait, Load, Compute, Accumulate, Store, Loop,
                 Assign, FragmentLoad, MmaSync, WarpgroupMma]


@dataclass(frozen=True)
class RegisterTile:
    """An accumulator 008 register_tile made a per-thread register array: one element per
    value of the register loops its index names, row-major (`register acc0[2, 4]`)."""
    acc: str
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        n = 1
        for e in self.shape:
            n *= e
        return n

    def text(self) -> str:
        return f"register {self.acc}[{', '.join(map(str, self.shape))}]"


PRECISION_NOTE = {"tf32": "matmul operands rounded to TF32, accumulated in float32",
                  "bfloat16": "matmul operands are bfloat16 values, accumulated in float32",
                  "float16": "matmul operands are float16 values, accumulated in float32"}


@dataclass(frozen=True)
class TileKernel(Displayable):
    name: str
    outputs: tuple[str, ...]
    body: tuple[TileStmt, ...]     # uniform statements, then one Tile
    knobs: tuple[tuple[str, object], ...] = ()   # the scheduling choices made so far
    # Loop IR's locals: tensors the kernel keeps on chip, a row at a time (shared memory once
    # materialised); the scheduler carries them through every pass.
    locals: tuple[LocalBuffer, ...] = ()
    # Decisions the lowering reads instead of re-deriving them: the register tiles 008 made
    # (shape of each register array).
    register_tiles: tuple[RegisterTile, ...] = ()
    split_k: SplitK | None = None
    reduces_for: str = ""          # on 003's reducer: the split kernel whose partials it adds
    repacks: tuple[Repack, ...] = ()   # 011: operands staged from a 16-byte pitched workspace
    repacks_for: str = ""          # on a repack kernel: the kernel it copies an operand for (runs first)
    flash: object = None           # Loop IR's FlashPlan: scheduled by 001 tileify (flash/flash_tile.py)
    mma: MmaTile | None = None     # 008: the matmul runs on tensor cores (fragments, warps, instruction)
    # How the kernel's matmul multiplies, stamped by 001 tileify: "float32" (exact FFMA) or
    # "tf32" (its operands are round_tf32 values: an mma.sync ...tf32 lowering may read them
    # as tf32 fragments; docs/precision.md).
    precision: str = "float32"

    def register_tile(self, acc: str) -> RegisterTile | None:
        for r in self.register_tiles:
            if r.acc == acc:
                return r
        return None

    def local_names(self) -> frozenset[str]:
        return frozenset(b.name for b in self.locals)

    def tile(self) -> Tile:
        for s in self.body:
            if isinstance(s, Tile):
                return s
        raise ValueError(f"kernel {self.name} has no Tile")

    def __str__(self) -> str:
        lines = [f"=== {self.name} -> {', '.join(self.outputs)} ==="]
        lines += [b.text() for b in self.locals] + ([self.flash.text()] if self.flash is not None else [])
        lines += self.flash.mma.fragment_lines() if getattr(self.flash, "mma", None) is not None else []
        lines += [r.text() for r in self.register_tiles]
        lines += self.mma.text().splitlines() if self.mma is not None else []
        lines += [self.split_k.text()] if self.split_k is not None else []
        lines += [f"reduces {self.reduces_for}  # its split-K partial sums, in split order"] if self.reduces_for else []
        lines += [r.text() for r in self.repacks]
        lines += [f"repacks for {self.repacks_for}  # runs just before it"] if self.repacks_for else []
        lines += [f"precision {self.precision}  # {PRECISION_NOTE.get(self.precision, '')}"] \
            if self.precision != "float32" else []
        format_body(self.body, 0, lines)
        return "\n".join(lines)


def format_body(body, depth: int, lines: list[str]) -> None:
    pad = "    " * depth
    for s in body:
        note = f"  # {s.note}" if isinstance(s, Compute) and s.note else ""
        lines.append(pad + s.text() + note)
        if isinstance(s, (Tile, StridedLoop, Loop)):
            format_body(s.body, depth + 1, lines)


@dataclass(frozen=True)
class TileProgram(Displayable):
    buffers: tuple[Buffer, ...]
    written: tuple[Buffer, ...]
    kernels: tuple[TileKernel, ...]
    outputs: tuple[str, ...]

    def types(self):
        return {b.name: b.type for b in self.buffers + self.written}

    def header(self) -> str:
        return format_header(self.buffers + self.written, self.outputs)

    def kernel(self, name: str) -> TileKernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    def __str__(self) -> str:
        return "\n\n".join(str(k) for k in self.kernels)


def map_body(body, fn):
    """Rebuild a statement tree bottom-up: fn(stmt with rebuilt children) -> stmt or tuple."""
    out = []
    for s in body:
        if isinstance(s, Tile):
            s = Tile(s.axes, map_body(s.body, fn))
        elif isinstance(s, StridedLoop):
            s = StridedLoop(s.var, s.start, s.stop, s.step, s.kind, map_body(s.body, fn), s.role, s.unroll)
        elif isinstance(s, Loop):
            s = Loop(s.var, s.extent, s.kind, map_body(s.body, fn), s.role, s.unroll, s.stop)
        r = fn(s)
        if isinstance(r, tuple):
            out.extend(r)
        elif r is not None:
            out.append(r)
    return tuple(out)


def walk(body, loops=()):
    """Every statement, depth first, with its enclosing loop-like nodes."""
    for s in body:
        yield s, loops
        if isinstance(s, (Tile, StridedLoop, Loop)):
            yield from walk(s.body, loops + (s,))


def used_vars(body) -> set[str]:
    """Every variable a loop, axis, slab or index inside `body` names (what a fresh name must avoid)."""
    names: set[str] = set()
    for s, _ in walk(body):
        if isinstance(s, (Loop, StridedLoop)):
            names.add(s.var)
        elif isinstance(s, Tile):
            names |= {a.var for a in s.axes}
        if isinstance(s, (Load, Store)):
            for e in s.index:
                names |= free_vars(e)
        if isinstance(s, Stage):
            names |= {a.var for a in s.slab}
    return names


def accumulators(body) -> list[tuple[str, str]]:
    """(accumulator, reduction) for every accumulator folded into inside `body`, in order."""
    seen = []
    for s, _ in walk(body):
        if isinstance(s, Accumulate) and (s.acc, s.reduction) not in seen:
            seen.append((s.acc, s.reduction))
        elif isinstance(s, (MmaSync, WarpgroupMma)) and (s.acc, "sum") not in seen:
            seen.append((s.acc, "sum"))
    return seen
