"""The Tile IR of a flash kernel on tensor cores (FlashPlan.mma, flash_mma.py): what the kernel
does, spelled from the record fuse_attention stamped (001 tileify calls it in place of the
FFMA schedule, flash_tile.py; no later Tile pass rewrites it, and k001 lowers the record
itself, flash_mma_lower.py). For the 16-row warps of FlashMma, lane = 4 fm_g + fm_t:

    register q_frag[D/16, 8]   A fragments of Q (halves), read once
    register s_tile[Tk/8, 4]   C fragments of S (FP32), then P
    register p_frag[Tk/16, 8]  P as A fragments (halves), the same lane's C elements
    register row_out[Dv/8, 4]  C fragments of O (FP32); row_max[2], row_sum[2]: rows g, g + 8
    Tile(axes=([fm_hg, fm_rw,] fm_g:8, fm_t:4=THREAD, <block axes>)):
        q_frag[kk, e] := q[row(e), 16 kk + col(e)]                (PTX's A table)
        for fm_kt in 0..T/Tk [while fm_kt < the block's last row's tile]:  # serial
            k_smem, v_smem = the tile's keys and values, a cp.async ring of 2 (prefetch 1)
            s_tile[j] <- mma(q_frag[kk], k_frag[j])               S = Q K^T, k_frag by ldmatrix.x4
            the program's score on each C element (scale, masks; keys past T: -inf)
            per row half h: the tile's max, Combine over the quad (fm_t), rescale, P = exp
            p_frag[ks, e] := half(s_tile[...])                    C of S is A of P
            row_out[n] <- mma(p_frag[ks], v_frag[n])              O += P V, v_frag by ldmatrix.x4.trans
        Combine(row_sum) over the quad; the program's epilogue per C element of O

The fragment index expressions are fitted from PTX's tables (deplokit.ir.fragments), as the
lowering reads them: a table that is not linear in the lane's and the element's bits is
refused (DeplokitError)."""
from __future__ import annotations

import dataclasses

from ...errors import DeplokitError
from ...ir.flash_mma import FlashMma
from ...ir.fragments import SHAPES, WARP, accumulator_reuse, ptx_layout
from ...ir.index import Affine, const, floordiv, free_vars, mod, substitute, var
from ...ir.loop_ir import Compute, Load, Loop, Store
from ...ir.tile_ir import (
    BLOCK,
    THREAD,
    Assign,
    AsyncWait,
    Combine,
    FragmentLoad,
    MmaSync,
    RegisterTile,
    SlabAxis,
    Stage,
    Tile,
    TileAxis,
    TileKernel,
)
from ..mma.mma_lower import lane_expr
from ..stage_geometry import copy_unit
from .flash_mma_lower import PAD, rows_of_16_bytes

G, T = "fm_g", "fm_t"
NEG_INF = float("-inf")
Q_FRAG, K_FRAG, V_FRAG, P_FRAG, S_TILE = "q_frag", "k_frag", "v_frag", "p_frag", "s_tile"
K_SMEM, V_SMEM = "k_smem", "v_smem"


def element_expr(layout, dim: int, e: str, n: int) -> Affine:
    """Row (dim 0) or column (dim 1) of fragment element `e` (a loop of n) in lane 4g + t, as
    an index expression: PTX's tables are a lane part (linear in g's and t's bits) plus an
    element part (linear in e's bits)."""
    lane_part = [layout.coords[lane][0][dim] - layout.coords[0][0][dim] for lane in range(WARP)]
    elem = [layout.coords[0][i][dim] for i in range(n)]
    for lane in range(WARP):
        for i in range(n):
            if layout.coords[lane][i][dim] != lane_part[lane] + elem[i]:
                raise DeplokitError(f"fragment {layout.operand}: element {i}'s place is not the lane's plus the "
                                    "element's: no index expression gives it")
    out = lane_expr(lane_part, G, T) + elem[0]
    ranges = {e: n}
    for k in range(n.bit_length() - 1):
        d = elem[1 << k] - elem[0]
        if any(elem[i] != elem[0] + sum(elem[1 << b] - elem[0] for b in range(n.bit_length() - 1) if i >> b & 1)
               for i in range(n)):
            raise DeplokitError(f"fragment {layout.operand}: the element part is not linear in the element's bits")
        if d:
            out = out + mod(floordiv(var(e), 1 << k, ranges), 2, ranges) * d
    return out


class _Tile:
    def __init__(self, kernel: TileKernel, types):
        self.kernel, self.types = kernel, types
        fm: FlashMma = kernel.flash.mma
        self.fm = fm
        self.shape = SHAPES[f"m16n8k16.{fm.kind}"]
        self.la, self.lb, self.lc = (ptx_layout(self.shape, op) for op in "ABC")
        self.tk, self.d, self.dv = fm.key_tile, fm.dot[1], fm.col[1]
        self.n_keys = fm.keys[1]
        self.half = types[fm.k.tensor].dtype
        self.threads, self.blocks, self.row_base = self.axes()
        self.ranges = {a.var: a.extent for a in self.threads + self.blocks}
        # the softmax's row halves: C elements 2h, 2h + 1 sit in rows g + 8h of every lane
        if any(self.lc.coords[lane][c][0] != lane // 4 + 8 * (c // 2) for lane in range(WARP) for c in range(4)):
            raise DeplokitError(f"{kernel.name}: the C fragment's rows are not g + 8 (element // 2)")

    def axes(self):
        """THREAD axes (heads of the group, row warps, g, t: flattened row-major, lane = 4g + t),
        BLOCK axes as the lowering deals them; the query row of a lane's h = 0 row."""
        fm = self.fm
        threads = ([TileAxis("fm_hg", fm.group, THREAD)] if fm.group > 1 else []) + \
            ([TileAxis("fm_rw", fm.row_warps, THREAD)] if fm.row_warps > 1 else []) + \
            [TileAxis(G, 8, THREAD), TileAxis(T, 4, THREAD)]
        blocks = []
        for name, n in fm.rows:
            if name == fm.query:
                blocks.append(TileAxis("fm_qb", -(-n // fm.query_tile), BLOCK))
            elif name == fm.heads:
                blocks.append(TileAxis("fm_hb", n // fm.group, BLOCK))
            else:
                blocks.append(TileAxis(name, n, BLOCK))
        base = var("fm_qb") * fm.query_tile + var(G)
        if fm.row_warps > 1:
            base = base + var("fm_rw") * 16
        return threads, blocks, base

    def rows(self, query: Affine | None) -> dict:
        """Loop IR's row variables as this thread's (the query row `query`)."""
        fm, out = self.fm, {}
        for name, _ in fm.rows:
            if name == fm.query:
                if query is not None:
                    out[name] = query
            elif name == fm.heads:
                out[name] = var("fm_hb") * fm.group + (var("fm_hg") if fm.group > 1 else const(0))
        return out

    def sub(self, index, mapping, ranges) -> tuple[Affine, ...]:
        return tuple(substitute(e, mapping, {**self.ranges, **ranges}) for e in index)

    def run(self) -> TileKernel:
        fm = self.fm
        m_name, l_name, o_name = fm.locals
        body: list = [self.query_fragments()]
        body += [Loop("fm_h", 2, "register", (Assign(m_name, NEG_INF, (var("fm_h"),)),
                                              Assign(l_name, 0.0, (var("fm_h"),))), "", True),
                 self.zero(o_name, self.dv // 8)]
        n_tiles = -(-self.n_keys // self.tk)
        stop = None
        if fm.causal:             # up to the tile of the block's last query row (mask: key > query)
            last = var("fm_qb") * fm.query_tile + (fm.query_tile - 1)
            stop = floordiv(last, self.tk, self.ranges) + 1
        tile = (AsyncWait((K_SMEM, V_SMEM)),) + self.stages() + (self.zero(S_TILE, self.tk // 8),) + \
            self.scores() + self.softmax() + self.pack_p() + self.pv()
        body.append(Loop("fm_kt", n_tiles, "serial", tile, stop=stop))
        body += self.epilogue()
        registers = (RegisterTile(Q_FRAG, (self.d // 16, 8)), RegisterTile(S_TILE, (self.tk // 8, 4)),
                     RegisterTile(P_FRAG, (self.tk // 16, 8)), RegisterTile(m_name, (2,)),
                     RegisterTile(l_name, (2,)), RegisterTile(o_name, (self.dv // 8, 4)))
        t = Tile(tuple(self.threads + self.blocks), tuple(body))
        return dataclasses.replace(self.kernel, body=(t,), locals=(), register_tiles=registers)

    @staticmethod
    def zero(name: str, tiles: int) -> Loop:
        return Loop("fm_n", tiles, "register", (Loop("fm_c", 4, "register", (
            Assign(name, 0.0, (var("fm_n"), var("fm_c"))),), "", True),), "", True)

    def query_fragments(self) -> Loop:
        """Q's A fragments, read once: element e of k step kk at PTX's (row, col)."""
        fm = self.fm
        row = self.row_base + element_expr(self.la, 0, "fm_e", 8) - var(G)
        col = element_expr(self.la, 1, "fm_e", 8) + var("fm_kk") * 16
        at = self.sub(fm.q.index, self.rows(row) | {fm.dot[0]: col}, {"fm_e": 8, "fm_kk": self.d // 16})
        inner = Loop("fm_e", 8, "register", (Load("q_in", fm.q.tensor, at),
                                              Assign(Q_FRAG, "q_in", (var("fm_kk"), var("fm_e")))), "", True)
        return Loop("fm_kk", self.d // 16, "register", (inner,), "", True)

    def stages(self) -> tuple:
        """The tile's keys and values: a ring of two in shared memory, rows padded by PAD, the
        next tile's copies issued before this one's compute."""
        fm, out = self.fm, []
        for name, access, inner, width in ((K_SMEM, fm.k, fm.dot[0], self.d), (V_SMEM, fm.v, fm.col[0], self.dv)):
            m = self.rows(None)
            if fm.heads:          # the block's heads share one kv head: the first one's
                m[fm.heads] = var("fm_hb") * fm.group
            m |= {fm.keys[0]: var("fm_kt") * self.tk, inner: const(0)}
            origin = self.sub(access.index, m, {"fm_kt": -(-self.n_keys // self.tk)})
            dims = {v: next(d for d, e in enumerate(access.index) if v in free_vars(e)) for v in (fm.keys[0], inner)}
            slab = (SlabAxis("fm_key", self.tk, dims[fm.keys[0]]), SlabAxis("fm_col", width, dims[inner]))
            copy = "async" if rows_of_16_bytes(access, inner) else "sync"
            s = Stage(name, access.tensor, origin, slab, pad=PAD, copy=copy, buffers=2, prefetch=1, dtype=self.half)
            threads = 1
            for a in self.threads:
                threads *= a.extent
            out.append(dataclasses.replace(s, unit=copy_unit(s, self.types[access.tensor], self.ranges, threads)))
        return tuple(out)

    def scores(self) -> tuple:
        """S = Q K^T: per k step an ldmatrix.x4 of two key groups of 8 (B fragments), an mma per
        group; then the program's score on each C element."""
        fm = self.fm
        kk, jp, j = var("fm_kk"), var("fm_jp"), var("fm_j")
        frag = FragmentLoad(K_FRAG, (const(0),), "B", K_SMEM, (var("fc") + jp * 16, kk * 16 + var("fr")),
                            "ldmatrix.x4", tiles=2)
        mma = Loop("fm_j", 2, "register", (MmaSync(S_TILE, (jp * 2 + j,), Q_FRAG, (kk,), K_FRAG, (j,),
                                                    self.shape.name),), "", True)
        pairs = Loop("fm_jp", self.tk // 16, "register", (frag, mma), "", True)
        k_loop = Loop("fm_kk", self.d // 16, "reduce", (pairs,), "", True)
        row = self.row_base + element_expr(self.lc, 0, "fm_c", 4) - var(G)
        key = var("fm_kt") * self.tk + var("fm_n") * 8 + element_expr(self.lc, 1, "fm_c", 4)
        mapping = self.rows(row) | {fm.keys[0]: key}
        here = {"fm_n": self.tk // 8, "fm_c": 4, "fm_kt": -(-self.n_keys // self.tk)}
        elem = [Load(fm.acc, S_TILE, (var("fm_n"), var("fm_c")))]
        for s in fm.score:
            if isinstance(s, Load):     # a mask operand: a row or key past the tensor reads 0 (-inf, unstored)
                elem.append(dataclasses.replace(s, index=self.sub(s.index, mapping, here), pad=0))
                continue
            elem.append(dataclasses.replace(s, args=tuple(substitute(a, mapping, {**self.ranges, **here})
                                                          if isinstance(a, Affine) else a for a in s.args)))
        x = fm.score_value
        if self.n_keys % self.tk:         # keys past T in the last tile
            elem += [Compute("key_ok", "less", (key, self.n_keys), dtype="bool"),
                     Compute("score_ok", "where", ("key_ok", x, NEG_INF), "a key past the last scores -inf")]
            x = "score_ok"
        elem.append(Assign(S_TILE, x, (var("fm_n"), var("fm_c"))))
        per = Loop("fm_n", self.tk // 8, "register", (Loop("fm_c", 4, "register", tuple(elem), "", True),), "", True)
        return k_loop, per

    def softmax(self) -> tuple:
        """Per row half h (rows g, g + 8: C elements 2h, 2h + 1) the online softmax in FP32: the
        tile's max over this lane's elements and its quad, the running max, sum and output
        rescaled, P = exp(s - max)."""
        m_name, l_name, o_name = self.fm.locals
        h = var("fm_h")
        c = h * 2 + var("fm_cc")        # C elements of row half h
        st = (var("fm_n"), c)

        def per_element(stmts, tiles):
            return Loop("fm_n", tiles, "register", (Loop("fm_cc", 2, "register", tuple(stmts), "", True),), "", True)
        body = (
            Assign("tile_max", NEG_INF),
            per_element((Load("s_key", S_TILE, st), Compute("tile_max_k", "maximum", ("tile_max", "s_key")),
                         Assign("tile_max", "tile_max_k")), self.tk // 8),
            Combine("tile_max", "max", (T,)),            # the quad: shfl.xor 1, 2
            Load("max_old", m_name, (h,)),
            Compute("max_new", "maximum", ("max_old", "tile_max"), "the running max, this tile included"),
            Compute("unseen", "equal", ("max_new", NEG_INF), dtype="bool"),
            Compute("max_base", "where", ("unseen", 0.0, "max_new"), "a row of masked keys keeps exp finite"),
            Compute("rescale_d", "subtract", ("max_old", "max_base")),
            Compute("rescale", "exp", ("rescale_d",), "what was summed under the old max, rescaled once per tile"),
            Load("sum_old", l_name, (h,)),
            Compute("sum_rescaled", "multiply", ("sum_old", "rescale")),
            Assign(l_name, "sum_rescaled", (h,)),
            per_element((Load("out_old", o_name, st), Compute("out_rescaled", "multiply", ("out_old", "rescale")),
                         Assign(o_name, "out_rescaled", st)), self.dv // 8),
            per_element((Load("s_key", S_TILE, st), Compute("p_d", "subtract", ("s_key", "max_base")),
                         Compute("p_key", "exp", ("p_d",)), Assign(S_TILE, "p_key", st),
                         Load("sum_acc", l_name, (h,)), Compute("sum_key", "add", ("sum_acc", "p_key"),
                                                                "this lane's part of the row"),
                         Assign(l_name, "sum_key", (h,))), self.tk // 8),
            Assign(m_name, "max_new", (h,)),
        )
        return (Loop("fm_h", 2, "register", body, "", True),)

    def pack_p(self) -> tuple:
        """P's A fragments from the score accumulators of the same lane (accumulator_reuse):
        element 4 jj + c of k step ks is C element c of score tile 2 ks + jj, converted to half."""
        try:
            src = accumulator_reuse(self.la, self.lc).sources
        except ValueError as e:
            raise DeplokitError(f"{self.kernel.name}: flash on tensor cores: {e}") from None
        if any(s != (i // 4, i % 4) for i, s in enumerate(src)):
            raise DeplokitError(f"{self.kernel.name}: P's A fragment is not score tiles e // 4, elements e % 4")
        ks, jj, c = var("fm_ks"), var("fm_jj"), var("fm_c")
        inner = (Load("p", S_TILE, (ks * 2 + jj, c)), Compute("p_half", "convert", ("p",), dtype=self.half),
                 Assign(P_FRAG, "p_half", (ks, jj * 4 + c)))
        return (Loop("fm_ks", self.tk // 16, "register", (Loop("fm_jj", 2, "register", (
            Loop("fm_c", 4, "register", inner, "", True),), "", True),), "", True),)

    def pv(self) -> tuple:
        """O += P V: per k step of 16 keys and pair of value tiles of 8 columns, an
        ldmatrix.x4.trans of V (B fragments) and an mma per tile."""
        _, _, o_name = self.fm.locals
        ks, n2, j = var("fm_ks"), var("fm_n2"), var("fm_j")
        frag = FragmentLoad(V_FRAG, (const(0),), "B", V_SMEM, (ks * 16 + var("fr"), n2 * 16 + var("fc")),
                            "ldmatrix.x4.trans", tiles=2)
        mma = Loop("fm_j", 2, "register", (MmaSync(o_name, (n2 * 2 + j,), P_FRAG, (ks,), V_FRAG, (j,),
                                                    self.shape.name),), "", True)
        inner = Loop("fm_n2", self.dv // 16, "register", (frag, mma), "", True)
        return (Loop("fm_ks", self.tk // 16, "reduce", (inner,), "", True),)

    def epilogue(self) -> tuple:
        """The row sums over each quad, then the program's output row per C element of O."""
        fm = self.fm
        m_name, l_name, o_name = fm.locals
        h = var("fm_h")
        loop = fm.epilogue[-1]
        row = self.row_base + h * 8
        c = h * 2 + var("fm_cc")
        col = substitute(var("fm_n") * 8 + element_expr(self.lc, 1, "fm_c", 4), {"fm_c": c}, {"fm_h": 2, "fm_cc": 2})
        mapping = self.rows(row) | {loop.var: col}
        here = {"fm_h": 2, "fm_cc": 2, "fm_n": self.dv // 8}

        def local(s):
            if isinstance(s, Load) and s.tensor == o_name:
                return Load(s.dst, o_name, (var("fm_n"), c))
            if isinstance(s, Load) and s.tensor in (m_name, l_name):
                return Load(s.dst, s.tensor, (h,))
            if isinstance(s, Compute):
                return dataclasses.replace(s, args=tuple(substitute(a, mapping, {**self.ranges, **here})
                                                         if isinstance(a, Affine) else a for a in s.args))
            if isinstance(s, Store):
                return dataclasses.replace(s, index=self.sub(s.index, mapping, here))
            return s
        per = Loop("fm_n", self.dv // 8, "register", (Loop("fm_cc", 2, "register", tuple(
            local(s) for s in loop.body), "", True),), "", True)
        head = (Load("sum_part", l_name, (h,)), Assign("row_total", "sum_part"), Combine("row_total", "sum", (T,)),
                Assign(l_name, "row_total", (h,)))
        rows = (Loop("fm_h", 2, "register", head + tuple(local(s) for s in fm.epilogue[:-1]) + (per,), "", True),)
        # rows past the query length are not stored (the lowering guards each store)
        return rows


def flash_mma_operands(s, fm: FlashMma) -> bool:
    """Whether a FragmentLoad or MmaSync is one of the flash kernel's (verify.py): K and V
    as B fragments, S = Q K^T and O += P V in the record's instruction."""
    if isinstance(s, FragmentLoad):
        return (s.dst, s.stage, s.operand) in ((K_FRAG, K_SMEM, "B"), (V_FRAG, V_SMEM, "B"))
    return s.shape == f"m16n8k16.{fm.kind}" and \
        (s.acc, s.a, s.b) in ((S_TILE, Q_FRAG, K_FRAG), (fm.locals[2], P_FRAG, V_FRAG))


def flash_mma_tile(kernel: TileKernel, types) -> TileKernel:
    """The Tile IR of a flash kernel stamped FlashPlan.mma: its record spelled out."""
    return _Tile(kernel, types).run()
