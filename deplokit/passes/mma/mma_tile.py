"""008's tensor-core path: the block's threads become warps, each warp owning a grid of 16 x 8
output tiles that one mma.sync apiece computes from fragments read out of the staged slabs.

    before (4096^2, after 007)
    Tile(axes=(a0t(M):16=THREAD, a1t(N):16=THREAD, a0b(M):256=BLOCK, a1b(N):256=BLOCK)):
        for a2o in 0..256:  # reduce (K)
            x0_smem = Stage(x0, ..., slab=(a0t:16@0, a2i:16@1))
            x1_smem = Stage(x1, ..., slab=(a2i:16@0, a1t:16@1))
            for a2i in 0..16:  # reduce (K)
                in0 = load x0_smem[a0t, a2i]
                in1 = load x1_smem[a2i, a1t]
                v0 = multiply(in0, in1)
                acc0 <- add(acc0, v0)
        matmul[a0b * 16 + a0t, a1b * 16 + a1t] = acc0

    after (mma=tf32)
    mma acc0[4, 4, 4]: mma.sync...m16n8k8...tf32, 2 x 4 warps of 64 x 32, ...   (+ the 3 layouts)
    Tile(axes=(a0w(M):2=THREAD, a1w(N):4=THREAD, a0g(M):8=THREAD, a1q(N):4=THREAD,
               a0b(M):32=BLOCK, a1b(N):32=BLOCK)):
        for a2o in 0..256:  # reduce (K)
            x0_smem = Stage(x0, ..., slab=(a0:128@0, a2i:16@1))
            x1_smem = Stage(x1, ..., slab=(a2i:16@0, a1:128@1))
            for a2i in 0..2:  # reduce (K)
                for a0f in 0..4:  # register (M)
                    acc0_a[a0f] = fragment A x0_smem[a0w * 64 + a0f * 16 + fr, a2i * 8 + fc]  # ldmatrix.x4
                for a1f in 0..4:  # register (N)
                    acc0_b[a1f] = fragment B x1_smem[a2i * 8 + fr, a1w * 32 + a1f * 8 + fc]  # lds
                for a0f in 0..4: for a1f in 0..4:
                    acc0[a0f, a1f] <- mma.m16n8k8.tf32(acc0_a[a0f], acc0_b[a1f])
        for a0f in 0..4: for a1f in 0..4: for a0c in 0..4:  (the C fragment's 4 elements)
            acc0_v = load acc0[a0f, a1f, a0c]
            matmul[a0b * 128 + a0w * 64 + a0f * 16 + a0g + (a0c // 2) * 8,
                   a1b * 128 + a1w * 32 + a1f * 8 + a1q * 2 + a0c % 2] = acc0_v

The THREAD axes a0g (8) x a1q (4) are a warp's lanes, lane = 4g + t in PTX's naming, so the
epilogue's indices spell the C fragment's layout. `fr`, `fc` in a FragmentLoad name the row and
column of the operand tile: each lane reads the elements MmaTile.layout_a/_b give it. A slab whose
rows run along the fragment's registers (A read along k, B stored n-major) is read with one
ldmatrix per fragment; otherwise each element is one shared load (`lds`).

Refused (the FMA register tile is used, the trace says why): a K loop body other than two
staged loads, a multiply and a sum; a K run that is not a whole number of the instruction's k
(a tail of 6 would read past the slab), except 002's K tail where one operand reads zeros past
K (past_k_outside); operands not float32 for tf32; threads not whole warps.
"""
from __future__ import annotations

import dataclasses

from ...ir.fragments import SHAPES, WARP, MmaShape, MmaTile, ptx_layout
from ...ir.index import Affine, Var, bounds, const, floordiv, free_vars, mod, var
from ...ir.lanes import is_multiple
from ...ir.loop_ir import Accumulate, Compute, Load, Loop, Store
from ...ir.substitute import substitute_body
from ...ir.tensor_ir import CONVERT_OP
from ...ir.tile_ir import (
    THREAD,
    AsyncWait,
    FragmentLoad,
    MmaSync,
    RegisterTile,
    SlabAxis,
    SplitArrive,
    Stage,
    Tile,
    TileAxis,
    TileKernel,
    WarpgroupMma,
    map_body,
    used_vars,
    walk,
)
from ..record import Skip, fresh_name, replace_tile
from ..wgmma.wgmma_tile import operand_layout, wgmma_block_reason

FR, FC = "fr", "fc"                # the fragment's row and column in a FragmentLoad's index
HALF_OF = {"bf16": "bfloat16", "f16": "float16"}
HALF_PRECISIONS = ("bfloat16", "float16")
# the instruction of each operand precision: tf32 inputs, or the operands' own half type
MMA_SHAPE = {"tf32": "m16n8k8.tf32", "bfloat16": "m16n8k16.bf16", "float16": "m16n8k16.f16"}


def mma_sync_tile(kernel: TileKernel, pairs, regs: dict, kind: str, target, types) -> TileKernel | Skip:
    """008's mma.sync path on `kind` (tf32 | half) inputs, or Skip(why not). An exact float32
    program stays exact: TF32 products only where the program asked for them
    (TileKernel.precision, docs/precision.md; a kernel without the field predates it)."""
    if target.sm < 80:
        return Skip(f"mma.sync with {kind} inputs needs sm_80+, not {target.name}")
    precision = getattr(kernel, "precision", None)
    if kind == "tf32" and precision not in (None, "tf32"):
        return Skip(f"mma: tf32 inputs need precision='tf32' (the kernel computes in {precision})")
    if kind == "half" and precision not in HALF_PRECISIONS:
        return Skip(f"mma: half inputs need a matmul of bf16 or fp16 operands (its operands are {precision})")
    if None in pairs.values():
        return Skip("mma: the output is not split into M and N blocks")
    return mma_tile(kernel, pairs, regs, SHAPES[MMA_SHAPE[precision if kind == "half" else kind]], types)


def mma_tile(kernel: TileKernel, pairs, regs: dict, shape: MmaShape, types, wgmma: bool = False) -> TileKernel | Skip:
    """The kernel on tensor cores, or Skip(why not). pairs: {role: (THREAD axis, BLOCK axis)};
    regs: {role: register extent} as the FMA tile would take (the block tile is threads x regs).
    wgmma: warpgroups of 4 warps each run wgmma.mma_async m64nNk16 on the staged slabs
    themselves (sm_90a; passes/wgmma/wgmma_tile.py says what it needs), N the block tile's."""
    tile = kernel.tile()
    (tm, bm), (tn, bn) = pairs["M"], pairs["N"]
    threads = [a for a in tile.axes if a.kind == THREAD]
    # a batched matmul's batch THREAD axes stay outside the warps (each batch slice is a group
    # of whole warps: the M x N threads are the innermost and a multiple of 32)
    outer = threads[:-2]
    if (threads[-2:] != [tm, tn] or any(a.role in ("M", "N") for a in outer)
            or (tm.extent * tn.extent) % WARP):
        return Skip("mma: the block's threads are not one M and one N axis of whole warps")
    accs = {(s.acc, s.reduction) for s, _ in walk(tile.body) if isinstance(s, Accumulate)}
    if len(accs) != 1 or next(iter(accs))[1] != "sum":
        return Skip("mma: not one sum accumulator")
    acc = next(iter(accs))[0]
    block_m, block_n = tm.extent * regs["M"], tn.extent * regs["N"]
    if wgmma:
        why = wgmma_block_reason(tm.extent * tn.extent, block_m, block_n)
        if why:
            return Skip(f"wgmma: {why}")
        warps = (tm.extent * tn.extent // WARP, 1)
    else:
        warps = warp_grid(tm.extent * tn.extent // WARP, block_m, block_n, shape)
    if warps is None:
        return Skip(f"mma: a {block_m} x {block_n} block tile does not split into warps of whole "
                    f"{shape.m} x {shape.n} tiles")
    wm, wn = warps
    fm, fn = block_m // wm // shape.m, block_n // wn // shape.n
    used = used_vars(kernel.body) | {FR, FC}
    names = {}
    for key, base in (("w0", tm.var[:-1] + "w"), ("w1", tn.var[:-1] + "w"), ("g", tm.var[:-1] + "g"),
                      ("q", tn.var[:-1] + "q"), ("f0", tm.var[:-1] + "f"), ("f1", tn.var[:-1] + "f"),
                      ("c", tm.var[:-1] + "c"), ("a", acc + "_a"), ("b", acc + "_b"), ("v", acc + "_v")):
        names[key] = fresh_name(base, used)
        used.add(names[key])
    lay = {op: ptx_layout(shape, op) for op in "ABC"}
    stamp = MmaTile(acc, shape, warps, (fm, fn), names["a"], names["b"], lay["A"], lay["B"], lay["C"],
                    (names["g"], names["q"]), block_n if wgmma else 0)
    ranges = {names["w0"]: wm, names["w1"]: wn, names["g"]: 8, names["q"]: 4, names["f0"]: fm, names["f1"]: fn,
              names["c"]: 4, FR: 16, FC: 16}
    ctx = _Ctx(stamp, names, ranges, tm.var, tn.var, {tm.var: bm.var, tn.var: bn.var}, regs, types, tile)
    try:
        body = ctx.body(tile.body)
    except _Refused as e:
        return Skip(f"{'wgmma' if wgmma else 'mma'}: {e}")
    # the operands' stages hold what the fragments read: half elements, raw (2 bytes each)
    body = map_body(body, lambda s: ctx.restage(s) if isinstance(s, Stage) else s)
    axes = []
    for a in tile.axes:
        if a is tm:
            axes += [TileAxis(names["w0"], wm, THREAD, "M"), TileAxis(names["w1"], wn, THREAD, "N"),
                     TileAxis(names["g"], 8, THREAD, "M"), TileAxis(names["q"], 4, THREAD, "N")]
        elif a is tn:
            continue
        elif a is bm or a is bn:
            axes.append(dataclasses.replace(a, extent=-(-a.extent // regs[a.role])))
        else:
            axes.append(a)
    out = replace_tile(kernel, Tile(tuple(axes), body))
    return dataclasses.replace(out, register_tiles=(RegisterTile(acc, (fm, fn, 4)),), mma=stamp)


def warp_grid(n_warps: int, block_m: int, block_n: int, shape: MmaShape):
    """(WM, WN) warps over the block tile, each warp a whole number of m x n tiles; the grid
    that reads the fewest fragments per k step (fragment_loads), None when none fits."""
    best = None
    for wm in range(1, n_warps + 1):
        if n_warps % wm:
            continue
        wn = n_warps // wm
        if block_m % (wm * shape.m) or block_n % (wn * shape.n):
            continue
        cost = fragment_loads(block_m // wm // shape.m, block_n // wn // shape.n)
        if best is None or cost < best[0]:
            best = (cost, (wm, wn))
    return None if best is None else best[1]


def fragment_loads(fm: int, fn: int) -> int:
    """ldmatrix a warp of fm x fn tiles issues per k step: one .x4 per A tile (16 x k), one
    .x4 per two B tiles (n8 each) when fn is even, else an .x2 per B tile."""
    return fm + (fn // 2 if fn % 2 == 0 else fn)


def ldsm_per_mma(n_warps: int, block_m: int, block_n: int, shape: MmaShape) -> float | None:
    """ldmatrix per mma.sync of the block tile's warp grid (None: no grid of whole tiles). At
    most 1/2 keeps the tensor cores fed: an .x4 moves 512 bytes, 4 cycles of an SM's 128 bytes
    a clock of shared memory, the SM's mma m16n8k16 a tensor-core issue every 2 (sm_80)."""
    grid = warp_grid(n_warps, block_m, block_n, shape)
    if grid is None:
        return None
    fm, fn = block_m // grid[0] // shape.m, block_n // grid[1] // shape.n
    return fragment_loads(fm, fn) / (fm * fn)


class _Refused(Exception):
    pass


@dataclasses.dataclass
class _Ctx:
    stamp: MmaTile
    n: dict
    ranges: dict
    t_m: str
    t_n: str
    blocks: dict                   # thread var -> its block var
    regs: dict
    types: dict
    tile: Tile
    half_stages: dict = dataclasses.field(default_factory=dict)     # stage name -> the dtype it holds
    k_tails: dict = dataclasses.field(default_factory=dict)         # K tail var -> its extent, whole k steps

    def restage(self, s: Stage) -> Stage:
        """The stage as the fragments read it: the dtype it holds, a K tail's slab grown to whole k;
        a tf32 operand's round_tf32 prologue (007) dropped: the fragment loads round each element
        (cvt.rna), so the stage copies the tensor's bytes as they are (cp.async, TMA)."""
        slab = tuple(dataclasses.replace(ax, extent=self.k_tails[ax.var]) if ax.var in self.k_tails else ax
                     for ax in s.slab)
        prologue = s.prologue
        if (s.name in self.half_stages and self.stamp.shape.dtype == "tf32" and prologue is not None
                and len(prologue.inputs) == 1 and prologue.inputs[0] == s.tensor and len(prologue.body) == 1
                and prologue.body[0].op == "round_tf32" and prologue.body[0].args == (prologue.params[0],)
                and prologue.body[0].dst == prologue.result):
            prologue = None
        return dataclasses.replace(s, dtype=self.half_stages.get(s.name, s.dtype), slab=slab, prologue=prologue)

    def body(self, body) -> tuple:
        out, stages = [], {}
        seen_k = False
        for s in body:
            if isinstance(s, Stage):
                stages[s.name] = s
                out.append(self.stage(s))
            elif isinstance(s, AsyncWait):
                out.append(s)
            elif isinstance(s, Loop) and s.role == "K":
                seen_k = True
                out.append(self.k_loop(s))
            elif seen_k:
                out.append(s)
            else:
                raise _Refused(f"{s.text()} before the K loop")
        k_end = max(i for i, s in enumerate(out) if isinstance(s, Loop) and s.role == "K")
        return tuple(out[:k_end + 1]) + self.epilogue(tuple(out[k_end + 1:]))

    def block_scale(self) -> dict:
        return {b: var(b) * self.regs["M" if t == self.t_m else "N"] for t, b in self.blocks.items()}

    def past_k_outside(self, st: Stage, tail: Loop) -> bool:
        """Whether stage `st`'s elements past the K tail `tail` lie outside its tensor for every
        block (the copy guards read zeros there): its K dim's origin plus the tail's extent is
        at least the dim's extent."""
        ax = next((a for a in st.slab if a.var == tail.var), None)
        if ax is None or st.tensor not in self.types:
            return False
        b = bounds(st.origin[ax.dim], {a.var: a.extent for a in self.tile.axes})
        return b is not None and b[0] + tail.extent >= self.types[st.tensor].shape[ax.dim]

    def stage(self, s: Stage) -> Stage:
        sizes = {self.t_m: ("a" + self.t_m[1:-1], self.regs["M"]), self.t_n: ("a" + self.t_n[1:-1], self.regs["N"])}
        slab = tuple(SlabAxis(sizes[ax.var][0], ax.extent * sizes[ax.var][1], ax.dim) if ax.var in sizes else ax
                     for ax in s.slab)
        origin = substitute_body((s,), self.block_scale(), {})[0].origin
        return dataclasses.replace(s, slab=slab, origin=origin)

    def k_loop(self, s: Loop) -> Loop:
        inner = [x for x in s.body if isinstance(x, Loop) and x.role == "K"]
        if inner:                                        # a K-outer loop: stages, then the compute loop
            body = []
            for x in s.body:
                if isinstance(x, Stage):
                    body.append(self.stage(x))
                elif isinstance(x, AsyncWait):
                    body.append(x)
                elif isinstance(x, Loop) and x.role == "K":
                    body.append(self.k_loop(x))
                else:
                    raise _Refused(f"{x.text()} in the K-outer loop")
            return dataclasses.replace(s, body=tuple(body))
        return self.compute_loop(s)

    def compute_loop(self, s: Loop) -> Loop:
        loads = [x for x in s.body if isinstance(x, Load)]
        comps = [x for x in s.body if isinstance(x, Compute)]
        accs = [x for x in s.body if isinstance(x, Accumulate)]
        # precision="tf32" programs round each operand (round_tf32) before the multiply; the
        # fragment loads round to tf32 themselves (cvt.rna: the same value but on exact ties)
        # a half program's operands are `convert -> float32` of half loads (exact): the
        # fragments read the half elements themselves
        wrap = "round_tf32" if self.stamp.shape.dtype == "tf32" else CONVERT_OP
        rounds = {c.dst: c.args[0] for c in comps if c.op == wrap and len(c.args) == 1}
        muls = [c for c in comps if c.op == "multiply"]
        operands = {rounds.get(a, a) for a in muls[0].args} if len(muls) == 1 else set()
        if (len(s.body) != len(loads) + len(comps) + len(accs) or len(loads) != 2 or len(accs) != 1
                or len(muls) != 1 or len(comps) != 1 + len(rounds) or operands != {ld.dst for ld in loads}
                or accs[0].value != muls[0].dst):
            raise _Refused("the K loop's body is not two loads, a multiply and a sum")
        k = self.stamp.shape.k
        if s.extent % k and self.stamp.wgmma:
            raise _Refused(f"a K run of {s.extent} is not a whole number of k steps of {k}")
        if s.extent % k:
            # a K tail (002's last chunk): its own stages, slabs of exactly the tail; grown to a
            # whole k, an operand whose elements past K lie past its tensor's end reads zeros
            # there (the copies guard every unit), and a product with zero adds exactly nothing
            tails = [st for st, _ in walk(self.tile.body) if isinstance(st, Stage)
                     and st.name in {ld.tensor for ld in loads} and any(ax.var == s.var for ax in st.slab)]
            if len(tails) != len(loads) or any(st.buffers > 1 for st in tails):
                raise _Refused(f"a K run of {s.extent} is not a whole number of the instruction's k = {k}")
            if not any(self.past_k_outside(st, s) for st in tails):
                # a K inside a longer axis (x[:, 3:124]): past the tail lie real elements of both
                # operands, whose products the grown k would add
                raise _Refused(f"a K tail of {s.extent} grown to k = {k} would read elements past K inside both "
                               f"operands (a slice of a longer axis), not zeros")
            self.k_tails[s.var] = -(-s.extent // k) * k
            s = dataclasses.replace(s, extent=self.k_tails[s.var])
        by_role = {}
        for ld in loads:
            used = set().union(*(free_vars(e) for e in ld.index))
            role = {(True, False): "A", (False, True): "B"}.get((self.t_m in used, self.t_n in used), "")
            if not role or role in by_role:
                raise _Refused(f"{ld.text()} is not one operand's load")
            by_role[role] = ld
        for ld in loads:
            if not any(isinstance(st, Stage) and st.name == ld.tensor for st, _ in walk(self.tile.body)):
                raise _Refused(f"{ld.tensor} is not staged in shared memory")
            tensor = next(st.tensor for st, _ in walk(self.tile.body) if isinstance(st, Stage) and st.name == ld.tensor)
            dtype = self.types[tensor].dtype if tensor in self.types else "float32"
            if self.stamp.shape.dtype == "tf32" and dtype != "float32":
                raise _Refused(f"{tensor} is {dtype}; tf32 reads float32")
            if self.stamp.shape.dtype != "tf32" and (dtype != HALF_OF[self.stamp.shape.dtype]
                                                     or ld.dst not in rounds.values()):
                raise _Refused(f"{tensor} is {dtype}; {self.stamp.shape.name} reads {HALF_OF[self.stamp.shape.dtype]}")
            self.half_stages[ld.tensor] = dtype if self.stamp.shape.dtype != "tf32" else "float32"
        n, st = self.n, self.stamp
        if st.wgmma:
            return self.wgmma_loop(s, by_role)
        (fm, fn) = st.tiles
        m0 = var(n["w0"]) * (fm * st.shape.m) + var(n["f0"]) * st.shape.m
        n0 = var(n["w1"]) * (fn * st.shape.n) + var(n["f1"]) * st.shape.n
        kv = var(s.var) * k
        a_at = substitute_body((by_role["A"],), {self.t_m: m0 + var(FR), s.var: kv + var(FC)}, self.ranges)[0].index
        b_at = substitute_body((by_role["B"],), {s.var: kv + var(FR), self.t_n: n0 + var(FC)}, self.ranges)[0].index
        sa, sb = by_role["A"].tensor, by_role["B"].tensor
        fa = FragmentLoad(st.a, (var(n["f0"]),), "A", sa, a_at, self.via("A", sa, a_at))
        fb = FragmentLoad(st.b, (var(n["f1"]),), "B", sb, b_at, self.via("B", sb, b_at))
        for f in (fa, fb):
            if st.shape.per_reg == 2 and f.via == "lds":
                # packed 16-bit registers are filled by ldmatrix only
                raise _Refused(f"{f.operand}'s slab {f.stage} has no 16-byte rows ldmatrix can read")
        b_loop = Loop(n["f1"], fn, "register", (fb,), "N", True)
        lay_b = st.layout("B")
        if fb.via.startswith("ldmatrix") and fn % 2 == 0 and 2 * lay_b.registers <= 4:
            # two adjacent B tiles per ldmatrix (.x2 -> .x4): half the LDSM for B
            n0p = var(n["w1"]) * (fn * st.shape.n) + var(n["f1"]) * (2 * st.shape.n)
            b2 = substitute_body((by_role["B"],), {s.var: kv + var(FR), self.t_n: n0p + var(FC)}, self.ranges)[0].index
            via = fb.via.replace(f".x{lay_b.registers}", f".x{2 * lay_b.registers}")
            fb2 = FragmentLoad(st.b, (var(n["f1"]) * 2,), "B", sb, b2, via, 2)
            b_loop = Loop(n["f1"], fn // 2, "register", (fb2,), "N", True)
        mma = MmaSync(st.acc, (var(n["f0"]), var(n["f1"])), st.a, (var(n["f0"]),), st.b, (var(n["f1"]),),
                      st.shape.name)
        body = (Loop(n["f0"], fm, "register", (fa,), "M", True),
                b_loop,
                Loop(n["f0"], fm, "register", (Loop(n["f1"], fn, "register", (mma,), "N", True),), "M", True))
        return dataclasses.replace(s, extent=s.extent // k, body=body)

    def wgmma_loop(self, s: Loop, by_role) -> Loop:
        """One WarpgroupMma per k step of 16: warpgroup w0 // 4's 64 rows of A, all of B."""
        st, n = self.stamp, self.n
        k = st.shape.k
        ranges = self.ranges | {n["w0"]: st.warps[0]}
        m0 = floordiv(var(n["w0"]), 4, ranges) * 64
        kv = var(s.var) * k
        a_at = substitute_body((by_role["A"],), {self.t_m: m0 + var(FR), s.var: kv + var(FC)}, self.ranges)[0].index
        b_at = substitute_body((by_role["B"],), {s.var: kv + var(FR), self.t_n: var(FC)}, self.ranges)[0].index
        sa, sb = by_role["A"].tensor, by_role["B"].tensor
        for operand, stage_name, at in (("A", sa, a_at), ("B", sb, b_at)):
            # the slab as this pass grows it (threads x registers), holding halves
            stage = self.stage(self.restage(next(x for x, _ in walk(self.tile.body)
                                                 if isinstance(x, Stage) and x.name == stage_name)))
            why = operand_layout(operand, stage, at, st.wgmma)[1]
            if why:
                raise _Refused(why)
        mma = WarpgroupMma(st.acc, (const(0), const(0)), st.wgmma, st.shape.dtype, sa, a_at, sb, b_at)
        return dataclasses.replace(s, extent=s.extent // k, body=(mma,))

    def via(self, operand: str, stage_name: str, at) -> str:
        """ldmatrix when a stored row (16 bytes along the slab's innermost index) is what a
        register of PTX's ldmatrix gives every lane (trans: a column); else lds."""
        inner, outer = at[-1], at[:-1]
        inner_vars = free_vars(inner)
        along = {(True, False): FC, (False, True): FR}.get((FC in inner_vars, FR in inner_vars))
        if along is None or any(along in free_vars(e) for e in outer) or _coef(inner, along) != 1:
            return "lds"
        unit = 16 // (4 if self.stamp.shape.dtype == "tf32" else 2)      # elements in a 16-byte row
        stage = self.restage(next(st for st, _ in walk(self.tile.body)
                                  if isinstance(st, Stage) and st.name == stage_name))
        if stage.slab[-1].extent % unit or not is_multiple(inner - var(along), unit):
            return "lds"
        lay = self.stamp.layout(operand)
        for trans in (False, True):
            if (not trans or lay.per_reg == 2) and _ldmatrix_fits(lay, along, lay.per_reg, trans):
                return f"ldmatrix.x{lay.registers}{'.trans' if trans else ''}"
        return "lds"

    def epilogue(self, body) -> tuple:
        """After the K loops: every statement once per C element of every tile of the warp,
        the thread's (row, col) spelled from the C layout."""
        if not body:
            return ()
        st, n = self.stamp, self.n
        (fm, fn) = st.tiles
        row, col = _c_index(st.layout_c, var(n["g"]), var(n["q"]), var(n["c"]), self.ranges)
        m = var(n["w0"]) * (fm * st.shape.m) + var(n["f0"]) * st.shape.m + row
        nn = var(n["w1"]) * (fn * st.shape.n) + var(n["f1"]) * st.shape.n + col
        mapping = {self.t_m: m, self.t_n: nn} | self.block_scale()
        ranges = self.ranges | {b: 1 << 20 for b in self.blocks.values()}
        body = substitute_body(body, mapping, ranges)
        body = tuple(_rename_operand(s, st.acc, n["v"]) for s in body)
        # an in-kernel split's arrival stays between the nests, once a block: the partials'
        # stores before it, the last block's sum after it (inside the nest, each C element
        # would count in on its own, and the tile's last arrival need not be its last block's)
        cut = next((i for i, s in enumerate(body) if isinstance(s, SplitArrive)), None)
        if cut is not None:
            return self.nest(body[:cut]) + (body[cut],) + self.nest(body[cut + 1:])
        return self.nest(body)

    def nest(self, body) -> tuple:
        """`body` once per C element of every tile of the warp (the element's accumulator read
        first, where the body reads it)."""
        if not body:
            return ()
        st, n = self.stamp, self.n
        (fm, fn) = st.tiles
        reads = any(n["v"] in getattr(s, "args", ()) or getattr(s, "value", None) == n["v"] for s, _ in walk(body))
        load = (Load(n["v"], st.acc, (var(n["f0"]), var(n["f1"]), var(n["c"]))),) if reads else ()
        inner = Loop(n["c"], 4, "register", load + body, "", True)
        return (Loop(n["f0"], fm, "register", (Loop(n["f1"], fn, "register", (inner,), "N", True),), "M", True),)


def _ldmatrix_fits(lay, along: str, per: int, trans: bool) -> bool:
    """Whether register i of lane 4g+t holds, in (stored row, unit) coordinates, what ldmatrix
    gives it: row g, units per*t .. (trans: rows per*t .., unit g) of matrix i."""
    for i in range(lay.registers):
        def su(rc):                                   # (stored row, unit along the slab's rows)
            return (rc[0], rc[1]) if along == FC else (rc[1], rc[0])
        o = su(lay.coords[0][i * per])
        for lane in range(WARP):
            g, t = lane >> 2, lane % 4
            for j in range(per):
                want = (o[0] + per * t + j, o[1] + g) if trans else (o[0] + g, o[1] + per * t + j)
                if su(lay.coords[lane][i * per + j]) != want:
                    return False
    return True


def _c_index(lay, g: Affine, t: Affine, c: Affine, ranges) -> tuple[Affine, Affine]:
    """The C layout as index expressions of g, t and the element c = 2*hi + lo, fitted from
    the table (PTX's is g + 8*(c // 2), 2t + c % 2); a table no such form gives is refused."""
    form = lay.affine()
    if form is None or len(form) != 4 or any(form[i][d][1:] != form[0][d][1:] for i in range(4) for d in (0, 1)):
        raise _Refused("the C fragment layout is not one affine map of the lane")
    hi, lo = floordiv(c, 2, ranges), mod(c, 2, ranges)
    out = []
    for d, (x, y) in enumerate(((g, t), (g, t))):
        base, cg, ct = form[0][d]
        step_lo, step_hi = form[1][d][0] - base, form[2][d][0] - base
        if form[3][d][0] != base + step_lo + step_hi:
            raise _Refused("the C fragment layout is not one affine map of the element")
        out.append(x * cg + y * ct + hi * step_hi + lo * step_lo + base)
    return out[0], out[1]


def _coef(e: Affine, name: str) -> int:
    return sum(c for atom, c in e.terms if isinstance(atom, Var) and atom.name == name)


def _rename_operand(s, old: str, new: str):
    if isinstance(s, Compute):
        return dataclasses.replace(s, args=tuple(new if a == old else a for a in s.args))
    if isinstance(s, Store) and s.value == old:
        return dataclasses.replace(s, value=new)
    if isinstance(s, Loop):
        return dataclasses.replace(s, body=tuple(_rename_operand(x, old, new) for x in s.body))
    if isinstance(s, Accumulate) and s.value == old:
        return dataclasses.replace(s, value=new)
    return s
