"""003 split_matmul_k: promote the K-outer chunk loop into a grid dimension (split-K).

A matmul with few outputs and a long K (an LLM projection at decode or short prefill: M of
1..32 rows, K in the thousands) launches too few blocks to fill the GPU, and each block
walks the whole of K alone. Split-K gives the K-outer chunks to S blocks per output tile:
block s reduces chunks s*C .. s*C + C-1 (C = chunks / S) into a partial sum and adds it into
the output with an atomic add. The grid grows S-fold; each block's K walk is S times shorter.

    before (nn.Linear(2048, 256, bias=False) on 32 tokens)
    Tile(axes=(a0(M):32=THREAD, a1(N):256=THREAD)):
        for a2o in 0..128:  # reduce (K)
            for a2i in 0..16:  # reduce (K)
                in0 = load input[0, a0, a2o * 16 + a2i]
                in1 = load p_weight[a1, a2o * 16 + a2i]
                v0 = multiply(in0, in1)
                acc0 <- add(acc0, v0)
        linear[0, a0, a1] = acc0

    after (splits=16: 16 blocks per output tile, 8 chunks = 128 of K each)
    Tile(axes=(a0(M):32=THREAD, a1(N):256=THREAD, a2s(K):16=BLOCK)):
        for a2o in 0..8:  # reduce (K)
            for a2i in 0..16:  # reduce (K)
                in0 = load input[0, a0, a2s * 128 + a2o * 16 + a2i]
                in1 = load p_weight[a1, a2s * 128 + a2o * 16 + a2i]
                v0 = multiply(in0, in1)
                acc0 <- add(acc0, v0)
        linear[0, a0, a1] += acc0  # atomic

Blockify (005) keeps the split axis as the slowest BLOCK axis and splits M and N as usual;
stage_inputs (007) stages each split's own chunks (origins `a2s * 128 + a2o * 16`).

Correctness. The partial sums of the splits add up to the full sum, so adding them into an
output that starts at zero gives the result only if everything the epilogue does between the
accumulator and the store is linear in it: scaling by a value that does not depend on K
(multiply, divide, neg), sums of such terms, a select between them and 0. A bias add, relu,
a mask to -inf, ... would be applied once per split: the pass skips such kernels and says
which operation stops it. The output is zeroed by the program itself: the pass stamps it
on the kernel (`zero-init <output>`) and the lowering emits a kernel `<name>_zero` just
before this one (deplokit.passes.lower.k003_zero_init), so
the result does not depend on what the output buffer held. On a GPU the atomic adds land in
an unspecified order (the last bits of a float sum may differ from run to run); the
simulator applies them in a fixed order.

Default. splits = 1 unless the grid is small: the 16 x 16-thread tiles (after 008's default
register block) are counted, and K is split into the most splits in the domain that keep
the grid within GRID_TARGET blocks, divide the K chunks evenly and leave each split at least
MIN_CHUNKS chunks. A K with a tail (K % BK != 0) is not split.
"""
from __future__ import annotations

import dataclasses

from ...ir.index import var
from ...ir.loop_ir import Accumulate, Compute, Load, Loop, Store
from ...ir.tile_ir import BLOCK, THREAD, AtomicAdd, Tile, TileAxis, TileKernel, walk
from ..record import KernelPass, Knob, PassContext, Skip, fresh_name, replace_tile
from .rewrite import substitute_body, used_vars
from .t008_register_tile import default_extents

DESCRIPTION = "promote the K-outer chunk loop into a grid dimension"
SPLITS = (1, 2, 4, 8, 16, 32)
GRID_TARGET = 128      # blocks: about one wave on the reference GPUs (108 to 170 SMs)
MIN_CHUNKS = 4         # K chunks each split reduces at least


class _Matmul:
    """The parts of a chunked matmul Tile split-K rewrites, or why it cannot."""

    def __init__(self, kernel: TileKernel):
        self.reason = ""
        try:
            self.tile = tile = kernel.tile()
        except ValueError:
            self.reason = "no Tile"
            return
        outer = [s for s in tile.body if isinstance(s, Loop) and s.role == "K"]
        self.outer = next((lp for lp in outer if any(isinstance(c, Loop) and c.role == "K" for c in lp.body)), None)
        if self.outer is None:
            self.reason = "no chunked matmul K loop (002 did not chunk K)" if not outer else "K is not chunked"
            return
        if any(a.kind == BLOCK for a in tile.axes):
            self.reason = "already split" if any(a.role == "K" for a in tile.axes) else "already has BLOCK axes"
            return
        inner = next(c for c in self.outer.body if isinstance(c, Loop) and c.role == "K")
        self.chunks, self.bk = self.outer.extent, inner.extent
        tail_var = self.outer.var[:-1] + "t"          # 002's name for the K % BK tail loop
        self.tail = [lp for lp in outer if lp.var == tail_var]
        if len(outer) > 1 + len(self.tail):
            self.reason = f"{len(outer) - len(self.tail)} K reductions in one kernel (fused matmuls)"
            return
        if self.tail:
            t = sum(lp.extent for lp in self.tail)
            self.reason = (f"K = {self.chunks * self.bk + t} leaves a tail of {t} after {self.chunks} chunks "
                           f"of {self.bk}: split-K needs whole chunks")
            return
        at = tile.body.index(self.outer)
        self.epilogue = tile.body[at + 1:]
        if any(not isinstance(s, (Load, Compute, Store)) for s in tile.body[:at] + self.epilogue):
            self.reason = "the K loop is not the kernel's only loop"
            return
        stores = [s for s, _ in walk(tile.body) if isinstance(s, Store)]
        if len(stores) != 1 or stores[0] not in self.epilogue:
            self.reason = f"{len(stores)} stores: split-K adds into exactly one output"
            return
        self.store = stores[0]
        if any(isinstance(s, Load) and s.tensor == self.store.tensor for s, _ in walk(tile.body)):
            self.reason = f"the kernel reads its output {self.store.tensor}"
            return
        accs = {s.acc: s.reduction for s, _ in walk(self.outer.body) if isinstance(s, Accumulate)}
        if any(r != "sum" for r in accs.values()):
            self.reason = "the K reduction is not a sum"
            return
        self.reason = _nonlinear(self.epilogue, set(accs)) or ""


def _nonlinear(epilogue, accs) -> str | None:
    """Why the value stored is not linear in the accumulators, or None."""
    kind = {a: "L" for a in accs}          # L: linear in the partial sums; I: independent of them

    def k(a):
        return kind.get(a, "I") if isinstance(a, str) else "I"

    for s in epilogue:
        if isinstance(s, Load):
            kind[s.dst] = "I"
        elif isinstance(s, Compute):
            ks = [k(a) for a in s.args]
            zero = [isinstance(a, (int, float)) and not isinstance(a, bool) and a == 0 for a in s.args]
            if "L" not in ks:
                kind[s.dst] = "I"
            elif s.op == "multiply" and ks.count("L") == 1:
                kind[s.dst] = "L"
            elif s.op == "divide" and ks == ["L", "I"]:
                kind[s.dst] = "L"
            elif s.op == "neg":
                kind[s.dst] = "L"
            elif s.op in ("add", "subtract") and all(x == "L" or z for x, z in zip(ks, zero)):
                kind[s.dst] = "L"
            elif s.op == "where" and ks[0] == "I" and all(x == "L" or z for x, z in zip(ks[1:], zero[1:])):
                kind[s.dst] = "L"
            elif s.op in ("add", "subtract"):
                other = next(a for a, x in zip(s.args, ks) if x == "I")
                return (f"the epilogue {s.op}s {other} (not scaled by the accumulator, e.g. a bias): "
                        f"every split would add it again")
            else:
                return f"the epilogue applies {s.op} to the accumulator, which is not linear in the partial sums"
        elif isinstance(s, Store):
            if k(s.value) != "L":
                return f"the value stored in {s.tensor} does not come from the accumulator"
    return None


def _thread_tiles(tile: Tile, sm_count: int) -> int:
    """Blocks blockify and 008's default register block would launch, roughly."""
    extents = {"M": 1, "N": 1}
    other = 1
    for a in tile.axes:
        if a.kind != THREAD:
            continue
        if a.role in extents:
            extents[a.role] *= a.extent
        else:
            other *= a.extent
    padded = {role: 16 * -(-size // 16) for role, size in extents.items()}
    regs = dict(zip(("M", "N"), default_extents(padded["M"], padded["N"], sm_count)))
    blocks = other
    for role, size in extents.items():
        if size > 16:
            blocks *= -(-size // (16 * regs[role]))
    return blocks


def _default_splits(kernel: TileKernel, target) -> int:
    mm = _Matmul(kernel)
    if mm.reason:
        return 1
    blocks = _thread_tiles(mm.tile, target.sm_count or 1)
    best = 1
    for s in SPLITS:
        if s > 1 and mm.chunks % s == 0 and mm.chunks // s >= MIN_CHUNKS and blocks * s <= GRID_TARGET:
            best = s
    return best


KNOBS = (Knob("splits", SPLITS, _default_splits, "blocks that share one output tile's K range (1: off)"),)


def apply(kernel: TileKernel, pctx: PassContext):
    mm = _Matmul(kernel)
    if mm.reason:
        return Skip(mm.reason)
    S = pctx.knobs["splits"]
    if S == 1:
        blocks = _thread_tiles(mm.tile, pctx.target.sm_count or 1)
        if blocks * 2 > GRID_TARGET:
            return Skip(f"splits=1: about {blocks} blocks already fill the grid")
        if mm.chunks < 2 * MIN_CHUNKS:
            return Skip(f"splits=1: {mm.chunks} K chunks of {mm.bk} are too few to split "
                        f"(two splits of {MIN_CHUNKS} need {2 * MIN_CHUNKS})")
        return Skip(f"splits=1: no split count in {SPLITS[1:]} divides {mm.chunks} K chunks into runs of at "
                    f"least {MIN_CHUNKS} within {GRID_TARGET} blocks")
    if mm.chunks % S:
        return Skip(f"{mm.chunks} K chunks do not divide into {S} splits")
    tile, outer = mm.tile, mm.outer
    base = outer.var[:-1] if outer.var.endswith("o") else outer.var
    used = used_vars(kernel.body)
    ks = fresh_name(f"{base}s", used)
    C = mm.chunks // S
    body = substitute_body(outer.body, {outer.var: var(ks) * C + var(outer.var)}, {outer.var: C, ks: S})
    new_outer = Loop(outer.var, C, outer.kind, body, outer.role, outer.unroll)
    st = mm.store
    out = []
    for s in tile.body:
        if s is outer:
            s = new_outer
        elif s is st:
            s = AtomicAdd(st.tensor, st.index, st.value)
        out.append(s)
    new_tile = Tile(tile.axes + (TileAxis(ks, S, BLOCK, "K"),), tuple(out))
    # the blocks add into the output: it must start at zero (k003_zero_init clears it)
    return dataclasses.replace(replace_tile(kernel, new_tile), zero_init=(st.tensor,))


PASS = KernelPass("003_split_matmul_k", "tile", DESCRIPTION, apply, KNOBS)
