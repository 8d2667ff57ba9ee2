"""A flash kernel on tensor cores (FlashPlan.mma, flash_mma.py) spelled in Kernel IR, from the
record alone: k001 materialize calls it in place of the FFMA schedule's statements.

    block = group heads x row_warps warps of 16 query rows; lane = 4g + t
    q_frag[D/16 x 4]  (b32) = pack(q[row g / g+8, 16 kk + 2t ..])     A fragments, once
    for kt in 0 .. key tiles (causal: up to the block's last row):
        k_s, v_s = the tile's keys and values (halves, rows padded by 8)      copies, barrier
        s[j] = sum over kk of mma(q_frag[kk], ldmatrix.x4 k_s)                S = Q K^T, FP32
        s = score(s) (scale, masks as the program computes them; keys past T: -inf)
        m_new = max(m, quad max of the tile's row), c = exp(m - m_new)      rows g and g + 8
        p = exp(s - m_new); l = l * c + p (this lane's part); o *= c
        p_frag = pack(p) in place (accumulator_reuse: C of S is A of P)
        o[n] += mma(p_frag, ldmatrix.x4.trans v_s)                          O += P V
    l = quad sum of l; out = the program's epilogue (o / l, converted), rows < S stored

Every lane's element of Q, S, P and O comes from PTX's tables (deplokit.ir.fragments): the
row and column of a C or A element are read off the table as expressions of g and t
(mma_lower.lane_expr), and the simulator moves data by the same tables, so a wrong map
computes a wrong attention on a CPU."""
from __future__ import annotations

from ...errors import DeplokitError
from ...ir import kernel_ir as K
from ...ir.flash_mma import Access, FlashMma
from ...ir.fragments import SHAPES, WARP, accumulator_reuse, ptx_layout
from ...ir.index import Affine, Var, free_vars, substitute, var
from ...ir.kernel_cp_async import CpAsync, CpAsyncCommit, CpAsyncWait
from ...ir.kernel_expr import affine_expr, flat_offset
from ...ir.kernel_mma import LdMatrix, Mma, PackHalves
from ...ir.loop_ir import Compute, Load, Store
from ...ir.types import DTYPE_CTYPE
from ...ir.value_expr import lower_value
from ..mma.mma_lower import PACKED, lane_expr

PAD = 8              # halves after each staged row: rows 16 bytes apart mod 128, ldmatrix conflict-free
G, T = "fm_g", "fm_t"
NEG_INF = float("-inf")


def _c(n: int) -> K.Const:
    return K.Const(n, "int")


def _add(*xs) -> K.Expr:
    out = None
    for x in xs:
        x = _c(x) if isinstance(x, int) else x
        if isinstance(x, K.Const) and x.value == 0:
            continue
        if isinstance(x, K.Const) and isinstance(out, K.Const):
            out = _c(out.value + x.value)
            continue
        out = x if out is None else K.Binary("+", out, x)
    return out if out is not None else _c(0)


def _mul(x, n: int) -> K.Expr:
    if isinstance(x, K.Const):
        return _c(x.value * n)
    return x if n == 1 else K.Binary("*", x, _c(n))


def _div(x, n: int) -> K.Expr:
    return x if n == 1 else K.Binary("/", x, _c(n))


def _mod(x, n: int) -> K.Expr:
    return _c(0) if n == 1 else K.Binary("%", x, _c(n))


class _Lowering:
    def __init__(self, kernel, types, params):
        self.kernel, self.types, self.params = kernel, types, params
        fm: FlashMma = kernel.flash.mma
        self.fm = fm
        self.shape = SHAPES[f"m16n8k16.{fm.kind}"]
        self.la, self.lb, self.lc = (ptx_layout(self.shape, op) for op in "ABC")
        try:
            self.reuse = accumulator_reuse(self.la, self.lc).sources
        except ValueError as e:
            raise DeplokitError(f"{kernel.name}: flash on tensor cores: {e}") from None
        self.extent = dict(fm.rows)
        self.seq = self.extent[fm.query]
        self.n_keys = fm.keys[1]
        self.d, self.dv = fm.dot[1], fm.col[1]
        self.half = DTYPE_CTYPE[types[fm.k.tensor].dtype]
        self.ranges = {G: 8, T: 4, "fm_hg": fm.group, "fm_rw": fm.row_warps}
        self.dtypes: dict[str, str] = {}
        self.names: dict[str, str] = {}      # a Loop-IR value -> its name for this element
        self.count = 0

    # -- where each element is -----------------------------------------------------------------
    def row_offsets(self, layout, i: int) -> int:
        """The fragment element i's row is g + this (0 or 8) in every lane: a quad shares rows."""
        rows = [layout.coords[lane][i][0] for lane in range(WARP)]
        off = rows[0]
        if any(r != lane // 4 + off for lane, r in enumerate(rows)):
            raise DeplokitError(f"{self.kernel.name}: fragment element {i}'s row is not g + a constant: "
                                "the softmax's quad reductions would mix rows")
        return off

    def col_expr(self, layout, i: int) -> Affine:
        return lane_expr([layout.coords[lane][i][1] for lane in range(WARP)], G, T)

    def mapping(self, row: str | None) -> dict:
        """Loop IR's row variables as this thread's: the query row `row` (a declared int)."""
        fm = self.fm
        out = {}
        for name, _ in fm.rows:
            if name == fm.query:
                if row is not None:
                    out[name] = var(row)
            elif name == fm.heads:
                out[name] = var("fm_hb") * fm.group + var("fm_hg")
            else:
                out[name] = var(name)
        return out

    def offset(self, access, mapping) -> K.Expr:
        ix = [affine_expr(substitute(e, mapping, self.ranges)) for e in access.index]
        return flat_offset(ix, access.shape)

    # -- the kernel ----------------------------------------------------------------------------
    def run(self) -> K.KernelFunc:
        fm = self.fm
        body: list = []
        blocks = self.block_axes()
        body += _decompose("fm_bid", K.Special("bid.x"), blocks)
        body += [K.Declare("fm_tid", "int", K.Special("tid.x")),
                 K.Declare("fm_lane", "int", K.Binary("%", K.Var("fm_tid"), _c(WARP))),
                 K.Declare("fm_warp", "int", K.Binary("/", K.Var("fm_tid"), _c(WARP))),
                 K.Declare(G, "int", K.Binary("/", K.Var("fm_lane"), _c(4))),
                 K.Declare(T, "int", K.Binary("%", K.Var("fm_lane"), _c(4))),
                 K.Declare("fm_hg", "int", _div(K.Var("fm_warp"), fm.row_warps)),
                 K.Declare("fm_rw", "int", _mod(K.Var("fm_warp"), fm.row_warps))]
        base = _add(_mul(K.Var("fm_qb"), fm.query_tile), _mul(K.Var("fm_rw"), 16), K.Var(G))
        for h in (0, 1):       # this lane's two rows (g and g + 8), and the same clamped for loads
            body.append(K.Declare(f"fm_row{h}", "int", _add(base, 8 * h)))
            body.append(K.Declare(f"fm_qrow{h}", "int", K.Binary("min", K.Var(f"fm_row{h}"), _c(self.seq - 1))))
        # ldmatrix rows: lanes 8i .. 8i+7 address matrix i
        lane = K.Var("fm_lane")
        r8 = K.Binary("%", lane, _c(8))
        body += [K.Declare("fm_krow", "int", _add(r8, _mul(K.Binary("/", lane, _c(16)), 8))),
                 K.Declare("fm_kcol", "int", _mul(K.Binary("%", K.Binary("/", lane, _c(8)), _c(2)), 8)),
                 K.Declare("fm_vrow", "int", _add(r8, _mul(K.Binary("%", K.Binary("/", lane, _c(8)), _c(2)), 8))),
                 K.Declare("fm_vcol", "int", _mul(K.Binary("/", lane, _c(16)), 8))]
        tk, kq = fm.key_tile, self.d // 16
        body += [K.DeclareArray("fm_qf", kq * 4, 0, PACKED), K.DeclareArray("fm_kb", 4, 0, PACKED),
                 K.DeclareArray("fm_vb", 4, 0, PACKED), K.DeclareArray("fm_pf", tk // 16 * 4, 0, PACKED),
                 K.DeclareArray("fm_s", tk // 8 * 4), K.DeclareArray("fm_o", self.dv // 8 * 4)]
        body += self.query_fragments()
        for h in (0, 1):
            body += [K.Declare(f"fm_m{h}", "float", K.Const(NEG_INF)), K.Declare(f"fm_l{h}", "float", K.Const(0.0))]
        body += [K.SharedArray("fm_ks", 2 * tk * (self.d + PAD), ctype=self.half),
                 K.SharedArray("fm_vs", 2 * tk * (self.dv + PAD), ctype=self.half)]
        n_tiles = -(-self.n_keys // tk)
        stop: K.Expr = _c(n_tiles)
        if fm.causal:          # keys up to the block's last query row (mask: key > query)
            last = _add(_mul(K.Var("fm_qb"), fm.query_tile), fm.query_tile - 1)
            stop = K.Binary("min", stop, _add(K.Binary("/", last, _c(tk)), 1))
        # a ring of two tiles: the next tile's copies are in flight while this one computes
        body.append(K.Declare("fm_stop", "int", stop))
        body += self.copies(_c(0), _c(0)) + [CpAsyncCommit()]
        kt = K.Var("fm_kt")
        following = _add(kt, 1)
        tile = [K.If(K.Binary("<", following, K.Var("fm_stop")),
                     tuple(self.copies(following, K.Binary("%", following, _c(2))))),
                CpAsyncCommit(), CpAsyncWait(1), K.Barrier(),
                K.Declare("fm_slot", "int", K.Binary("%", kt, _c(2)))]
        tile += self.scores() + self.softmax() + self.pv() + [K.Barrier()]
        body.append(K.For("fm_kt", _c(0), K.Var("fm_stop"), _c(1), tuple(tile)))
        body += self.epilogue()
        threads = fm.warps * WARP
        grid = 1
        for _, n in blocks:
            grid *= n
        return K.KernelFunc(self.kernel.name, self.params, (grid, 1, 1), (threads, 1, 1), tuple(body))

    def block_axes(self) -> list[tuple[str, int]]:
        fm, out = self.fm, []
        for name, n in fm.rows:
            if name == fm.query:
                out.append(("fm_qb", -(-n // fm.query_tile)))
            elif name == fm.heads:
                out.append(("fm_hb", n // fm.group))
            else:
                out.append((name, n))
        return out

    def query_fragments(self) -> list:
        """Q's A fragments, read once: register 4 kk + i packs elements 2i, 2i+1 (16 kk + col)."""
        fm, out = self.fm, []
        for kk in range(self.d // 16):
            for i in range(4):
                vals = []
                for e in (2 * i, 2 * i + 1):
                    h = self.row_offsets(self.la, e) // 8
                    m = self.mapping(f"fm_qrow{h}") | {fm.dot[0]: self.col_expr(self.la, e) + 16 * kk}
                    vals.append(K.GlobalLoad(fm.q.tensor, self.offset(fm.q, m), "float"))
                out.append(PackHalves("fm_qf", _c(4 * kk + i), vals[0], vals[1], fm.kind))
        return out

    def copies(self, tile: K.Expr, slot: K.Expr) -> list:
        """Key tile `tile` and its values into ring slot `slot` (rows past T read row T - 1:
        their scores are -inf, their P zero): 16-byte cp.async where a row's 8 halves are
        adjacent and aligned in global memory, else one element a copy."""
        fm, out = self.fm, []
        tk = fm.key_tile
        for arr, access, width, inner in (("fm_ks", fm.k, self.d, fm.dot[0]), ("fm_vs", fm.v, self.dv, fm.col[0])):
            i = f"{arr}_i"
            unit = 8 if rows_of_16_bytes(access, inner) else 1
            per_row = width // unit
            key = K.Binary("min", _add(_mul(tile, tk), K.Binary("/", K.Var(i), _c(per_row))), _c(self.n_keys - 1))
            m = self.mapping(None)
            if fm.heads:        # the block's heads share one kv head: the first one's
                m[fm.heads] = var("fm_hb") * fm.group
            m |= {fm.keys[0]: var(f"{arr}_key"), inner: var(f"{arr}_col")}
            col = _mul(K.Binary("%", K.Var(i), _c(per_row)), unit)
            at = _add(_mul(slot, tk * (width + PAD)), _mul(K.Binary("/", K.Var(i), _c(per_row)), width + PAD),
                      K.Var(f"{arr}_col"))
            copy = CpAsync(arr, at, access.tensor, self.offset(access, m), 16) if unit == 8 else \
                K.SharedStore(arr, at, K.GlobalLoad(access.tensor, self.offset(access, m), self.half))
            body = (K.Declare(f"{arr}_key", "int", key), K.Declare(f"{arr}_col", "int", col), copy)
            out.append(K.For(i, K.Var("fm_tid"), _c(tk * per_row), _c(fm.warps * WARP), body))
        return out

    def scores(self) -> list:
        """S = Q K^T into fm_s (tk / 8 C fragments), then the program's score on each element."""
        fm, out = self.fm, []
        tk = fm.key_tile
        out += [K.Assign("fm_s", K.Const(0.0), _c(i)) for i in range(tk // 8 * 4)]
        for kk in range(self.d // 16):
            for jp in range(tk // 16):        # two key groups of 8 a ldmatrix.x4: (j, d lo), (j, d hi), (j+1, ..)
                at = _add(_mul(K.Var("fm_slot"), fm.key_tile * (self.d + PAD)),
                          _mul(_add(K.Var("fm_krow"), 16 * jp), self.d + PAD), K.Var("fm_kcol"), 16 * kk)
                out.append(LdMatrix("fm_kb", _c(0), 4, False, "fm_ks", at))
                for j in (0, 1):
                    out.append(Mma(self.shape.name, "fm_s", _c((2 * jp + j) * 4), "fm_qf", _c(4 * kk), "fm_kb",
                                   _c(2 * j)))
        for j in range(tk // 8):
            for c in range(4):
                out += self.score_element(j, c)
        return out

    def score_element(self, j: int, c: int) -> list:
        fm = self.fm
        h = self.row_offsets(self.lc, c) // 8
        key = _add(_mul(K.Var("fm_kt"), fm.key_tile), 8 * j, affine_expr(self.col_expr(self.lc, c)))
        suffix = f"_{j}_{c}"
        kname = f"fm_key{suffix}"
        self.names = {fm.acc: fm.acc + suffix}
        self.dtypes = {fm.acc: "float32"}
        out = [K.Declare(kname, "int", key), K.Declare(fm.acc + suffix, "float", K.RegLoad("fm_s", _c(4 * j + c)))]
        mapping = self.mapping(f"fm_row{h}") | {fm.keys[0]: var(kname)}
        loads = [s for s in fm.score if isinstance(s, Load)]
        if loads:       # a mask's operands, read at the row and key clamped into the tensor
            kept = f"fm_keyc{suffix}"
            out.append(K.Declare(kept, "int", K.Binary("min", K.Var(kname), _c(self.n_keys - 1))))
            at = self.mapping(f"fm_qrow{h}") | {fm.keys[0]: var(kept)}
            for ld in loads:
                ctype = DTYPE_CTYPE[self.types[ld.tensor].dtype]
                access = Access(ld.tensor, ld.index, tuple(self.types[ld.tensor].shape))
                out.append(K.Declare(ld.dst + suffix, ctype, K.GlobalLoad(ld.tensor, self.offset(access, at), ctype)))
                self.dtypes[ld.dst], self.names[ld.dst] = self.types[ld.tensor].dtype, ld.dst + suffix
        out += self.computes([s for s in fm.score if not isinstance(s, Load)], mapping, suffix)
        x: K.Expr = self.operand(fm.score_value)[0]
        if self.n_keys % fm.key_tile:       # keys past T in the last tile
            x = K.Select(K.Binary("<", K.Var(kname), _c(self.n_keys)), x, K.Const(NEG_INF))
        out.append(K.Assign("fm_s", x, _c(4 * j + c)))
        return out

    def operand(self, a):
        if isinstance(a, str):
            return K.Var(self.names.get(a, a)), self.dtypes.get(a, "float32")
        if isinstance(a, bool):
            return K.Const(a, "bool"), None
        if isinstance(a, int):
            return K.Const(a, "int64"), None
        return K.Const(float(a)), None

    def computes(self, stmts, mapping, suffix: str) -> list:
        """The program's computes for one fragment element, their names suffixed (each
        element's values are registers of their own)."""
        out = []
        for s in stmts:
            args = [(affine_expr(substitute(a, mapping, self.ranges)), "int32") if isinstance(a, Affine)
                    else self.operand(a) for a in s.args]
            self.dtypes[s.dst] = s.dtype
            self.names[s.dst] = s.dst + suffix
            out += lower_value(s.dst + suffix, s.op, args, s.dtype, self.fresh)
        return out

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"fm_{prefix}{self.count}"

    def softmax(self) -> list:
        """The online softmax on the accumulators: per row half h (rows g, g + 8) the tile's max
        over this lane's elements then its quad (shfl.xor 1, 2), the running max, sum and
        output rescaled, P = exp(s - max) packed as P's A fragments."""
        tk, out = self.fm.key_tile, []
        halves = {c: self.row_offsets(self.lc, c) // 8 for c in range(4)}
        mx = "maximum"
        for h in (0, 1):
            tm = f"fm_tm{h}"
            out.append(K.Declare(tm, "float", K.Const(NEG_INF)))
            for j in range(tk // 8):
                for c in range(4):
                    if halves[c] == h:
                        out.append(K.Assign(tm, K.Call(mx, (K.Var(tm), K.RegLoad("fm_s", _c(4 * j + c))))))
            for lanes in (1, 2):
                out.append(K.Assign(tm, K.Call(mx, (K.Var(tm), K.Shuffle(K.Var(tm), lanes)))))
            new, basis, scale = f"fm_mnew{h}", f"fm_base{h}", f"fm_c{h}"
            out += [K.Declare(new, "float", K.Call(mx, (K.Var(f"fm_m{h}"), K.Var(tm)))),
                    K.Declare(basis, "float", K.Select(K.Binary("==", K.Var(new), K.Const(NEG_INF)),
                                                       K.Const(0.0), K.Var(new))),
                    K.Declare(scale, "float", K.Call("exp", (K.Binary("-", K.Var(f"fm_m{h}"), K.Var(basis)),))),
                    K.Assign(f"fm_l{h}", K.Binary("*", K.Var(f"fm_l{h}"), K.Var(scale))),
                    K.Assign(f"fm_m{h}", K.Var(new))]
        for n in range(self.dv // 8):
            for c in range(4):
                i = _c(4 * n + c)
                out.append(K.Assign("fm_o", K.Binary("*", K.RegLoad("fm_o", i), K.Var(f"fm_c{halves[c]}")), i))
        for j in range(tk // 8):
            for c in range(4):
                i, h = _c(4 * j + c), halves[c]
                p = K.Call("exp", (K.Binary("-", K.RegLoad("fm_s", i), K.Var(f"fm_base{h}")),))
                out += [K.Assign("fm_s", p, i),
                        K.Assign(f"fm_l{h}", K.Binary("+", K.Var(f"fm_l{h}"), K.RegLoad("fm_s", i)))]
        for ks in range(tk // 16):            # P's A fragment from the score accumulators, same lane
            for r in range(4):
                lo, hi = (self.reuse[2 * r + e] for e in (0, 1))
                out.append(PackHalves("fm_pf", _c(4 * ks + r), K.RegLoad("fm_s", _c(4 * (2 * ks + lo[0]) + lo[1])),
                                      K.RegLoad("fm_s", _c(4 * (2 * ks + hi[0]) + hi[1])), self.fm.kind))
        return out

    def pv(self) -> list:
        out = []
        for ks in range(self.fm.key_tile // 16):
            for n in range(self.dv // 16):    # two value tiles of 8 columns a ldmatrix.x4.trans
                at = _add(_mul(K.Var("fm_slot"), self.fm.key_tile * (self.dv + PAD)),
                          _mul(_add(K.Var("fm_vrow"), 16 * ks), self.dv + PAD), K.Var("fm_vcol"), 16 * n)
                out.append(LdMatrix("fm_vb", _c(0), 4, True, "fm_vs", at))
                for j in (0, 1):
                    out.append(Mma(self.shape.name, "fm_o", _c((2 * n + j) * 4), "fm_pf", _c(4 * ks), "fm_vb",
                                   _c(2 * j)))
        return out

    def epilogue(self) -> list:
        """The row sums over each quad, then the program's output row per C element of O."""
        fm = self.fm
        m_name, l_name, o_name = fm.locals
        out = []
        for h in (0, 1):
            for lanes in (1, 2):
                out.append(K.Assign(f"fm_l{h}", K.Binary("+", K.Var(f"fm_l{h}"), K.Shuffle(K.Var(f"fm_l{h}"), lanes))))
        loop = fm.epilogue[-1]
        store = next(s for s in loop.body if isinstance(s, Store))
        out_dtype = self.types[store.tensor].dtype
        for n in range(self.dv // 8):
            for c in range(4):
                h = self.row_offsets(self.lc, c) // 8
                local = {m_name: K.Var(f"fm_m{h}"), l_name: K.Var(f"fm_l{h}"), o_name: K.RegLoad("fm_o", _c(4 * n + c))}
                col = f"fm_col{n}_{c}"
                mapping = self.mapping(f"fm_row{h}") | {loop.var: var(col)}
                suffix = f"_{n}_{c}"
                out.append(K.Declare(col, "int", _add(8 * n, affine_expr(self.col_expr(self.lc, c)))))
                self.dtypes, self.names = {}, {}
                for s in fm.epilogue[:-1] + loop.body:
                    if isinstance(s, Load):
                        out.append(K.Declare(s.dst + suffix, "float", local[s.tensor]))
                        self.dtypes[s.dst], self.names[s.dst] = "float32", s.dst + suffix
                    elif isinstance(s, Compute):
                        out += self.computes((s,), mapping, suffix)
                value, have = self.operand(store.value)
                if have != out_dtype:
                    value = K.Cast(DTYPE_CTYPE[out_dtype], value)
                access = Access(store.tensor, store.index, tuple(self.types[store.tensor].shape))
                out.append(K.If(K.Binary("<", K.Var(f"fm_row{h}"), _c(self.seq)),
                                (K.GlobalStore(store.tensor, self.offset(access, mapping), value),)))
        return out


def rows_of_16_bytes(access, inner: str) -> bool:
    """Whether 8 halves along `inner` are adjacent and 16-byte aligned in global memory: it is
    the last index alone (stride one), and every other stride is a multiple of 8 elements."""
    last = access.index[-1]
    return (access.shape[-1] % 8 == 0 and last.const == 0 and last.terms == ((Var(inner), 1),)
            and all(inner not in free_vars(e) for e in access.index[:-1]))


def _decompose(flat: str, special, axes) -> list:
    """Each block axis from the flat block index, the last the fastest."""
    out = [K.Declare(flat, "int", special)]
    stride = 1
    for i, (name, n) in enumerate(reversed(axes)):
        e = K.Var(flat) if stride == 1 else K.Binary("/", K.Var(flat), _c(stride))
        if i < len(axes) - 1:
            e = K.Binary("%", e, _c(n))
        out.append(K.Declare(name, "int", e))
        stride *= n
    return out


def lower_flash_mma(kernel, types) -> K.KernelFunc:
    """The Kernel-IR function of a flash kernel stamped FlashPlan.mma."""
    fm = kernel.flash.mma
    store = next(s for s in fm.epilogue[-1].body if isinstance(s, Store))
    reads = list(dict.fromkeys((fm.q.tensor, fm.k.tensor, fm.v.tensor) +
                               tuple(s.tensor for s in fm.score if isinstance(s, Load))))
    params = tuple(K.Param(name, DTYPE_CTYPE[types[name].dtype], name != store.tensor, types[name].numel)
                   for name in reads + [store.tensor])
    return _Lowering(kernel, types, params).run()


def is_flash_mma(kernel) -> bool:
    """Whether the kernel's flash plan runs on tensor cores (FlashPlan.mma, decided by passes/flash/flash_mma.py)."""
    return getattr(getattr(kernel, "flash", None), "mma", None) is not None
