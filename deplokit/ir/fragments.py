"""Tensor-core fragments: which lane of a warp holds which element of an mma operand, as data.

`mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32` multiplies a 16 x 8 A by an 8 x 8 B into
a 16 x 8 C, and no single thread holds a row or a column: the 32 lanes of the warp each hold a
few scattered elements of every operand (a *fragment*), in the layouts the PTX ISA fixes
("Matrix Fragments for mma.m16n8k8 / mma.m16n8k16"). With groupID g = lane >> 2 and
threadID_in_group t = lane % 4, for tf32 m16n8k8:

    A 16 x 8 (row)  a0=(g, t)   a1=(g+8, t)   a2=(g, t+4)   a3=(g+8, t+4)
    B 8 x 8  (col)  b0=(t, g)   b1=(t+4, g)                          (k, n)
    C 16 x 8        c0=(g, 2t)  c1=(g, 2t+1)  c2=(g+8, 2t)  c3=(g+8, 2t+1)

A FragmentLayout is that table for one operand of one instruction: `coords[lane][i]` is the
(row, col) of element i of `lane`. Its `text()` is the formula above when the table is affine in
g and t (every PTX layout is), derived from the table itself, so a wrong table prints wrong;
`table()` draws the operand cell by cell with the lane that holds each element.

`ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16` loads N 8 x 8 matrices of 16-bit elements
(8 rows of 16 bytes) from shared memory into N registers of every lane: lane 8i + r supplies
the address of row r of matrix i, and register i of lane l receives elements 2(l % 4) and
2(l % 4) + 1 of row l / 4 of matrix i (with .trans, the transposed matrix: row 2(l % 4) and
2(l % 4) + 1 of column l / 4). A 16-byte row is also four 32-bit words, so the same instruction
loads tf32 fragments (a word per register, no .trans): LdMatrixLayout holds that as data.

The simulator (deplokit.runtime.warp_mma) executes mma.sync and ldmatrix with the PTX tables
here, keyed by instruction; the Tile IR carries its own FragmentLayout values (stamped by 008
register_tile) which the lowering reads to place addresses and the epilogue. A wrong lane
mapping in the IR therefore computes a wrong product in the simulator, on any machine.
"""
from __future__ import annotations

from dataclasses import dataclass

WARP = 32
OPERANDS = ("A", "B", "C")


@dataclass(frozen=True)
class MmaShape:
    """One mma.sync instruction: D[m, n] = A[m, k] @ B[k, n] + C, inputs in `dtype`, FP32
    accumulator. `per_reg` input elements share a 32-bit register (2 for 16-bit types)."""
    m: int
    n: int
    k: int
    dtype: str                      # tf32 | f16 | bf16

    @property
    def name(self) -> str:
        return f"m{self.m}n{self.n}k{self.k}.{self.dtype}"

    @property
    def per_reg(self) -> int:
        return 1 if self.dtype == "tf32" else 2

    def ptx(self) -> str:
        return f"mma.sync.aligned.m{self.m}n{self.n}k{self.k}.row.col.f32.{self.dtype}.{self.dtype}.f32"

    def operand_shape(self, operand: str) -> tuple[int, int]:
        return {"A": (self.m, self.k), "B": (self.k, self.n), "C": (self.m, self.n)}[operand]

    def elements(self, operand: str) -> int:
        r, c = self.operand_shape(operand)
        return r * c // WARP


M16N8K8_TF32 = MmaShape(16, 8, 8, "tf32")
M16N8K16_F16 = MmaShape(16, 8, 16, "f16")
M16N8K16_BF16 = MmaShape(16, 8, 16, "bf16")
SHAPES = {s.name: s for s in (M16N8K8_TF32, M16N8K16_F16, M16N8K16_BF16)}


def _ptx_coord(shape: MmaShape, operand: str, lane: int, i: int) -> tuple[int, int]:
    """PTX ISA's formula: (row, col) of element i of `lane` (B as (k, n))."""
    g, t = lane >> 2, lane % 4
    if operand == "C":                                  # same for every 16 x 8 f32 accumulator
        return g + 8 * (i >= 2), 2 * t + (i & 1)
    if shape.dtype == "tf32":                           # m16n8k8: one tf32 per register
        if operand == "A":
            return g + 8 * (i % 2), t + 4 * (i // 2)
        return t + 4 * i, g
    if operand == "A":                                  # m16n8k16 f16/bf16: pairs along k
        return g + 8 * ((i // 2) % 2), 2 * t + (i & 1) + 8 * (i >= 4)
    return 2 * t + (i & 1) + 8 * (i >= 2), g


@dataclass(frozen=True)
class FragmentLayout:
    """Which element of one operand every lane holds: coords[lane][i] = (row, col); element
    i sits in register i // per_reg of the lane (B's rows are k, its columns n)."""
    shape: MmaShape
    operand: str                    # A | B | C
    coords: tuple[tuple[tuple[int, int], ...], ...]

    @property
    def rows(self) -> int:
        return self.shape.operand_shape(self.operand)[0]

    @property
    def cols(self) -> int:
        return self.shape.operand_shape(self.operand)[1]

    @property
    def per_reg(self) -> int:
        return 1 if self.operand == "C" else self.shape.per_reg

    @property
    def registers(self) -> int:
        return len(self.coords[0]) // self.per_reg

    def lane_of(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(row, col) -> (lane, element): raises when an element is held twice or never."""
        out: dict[tuple[int, int], tuple[int, int]] = {}
        for lane, elems in enumerate(self.coords):
            for i, rc in enumerate(elems):
                if rc in out or not (0 <= rc[0] < self.rows and 0 <= rc[1] < self.cols):
                    raise ValueError(f"{self.operand} fragment of {self.shape.name}: element {rc} "
                                     f"{'held twice' if rc in out else 'outside the operand'}")
                out[rc] = (lane, i)
        if len(out) != self.rows * self.cols:
            raise ValueError(f"{self.operand} fragment of {self.shape.name} leaves elements unheld")
        return out

    def affine(self) -> tuple[tuple[tuple[int, int, int], tuple[int, int, int]], ...] | None:
        """Per element, ((row0, row per g, row per t), (col0, col per g, col per t)) when every
        lane's (row, col) is that affine function of g = lane >> 2 and t = lane % 4, else None."""
        out = []
        for i in range(len(self.coords[0])):
            base, dg, dt = self.coords[0][i], self.coords[4][i], self.coords[1][i]
            form = tuple((base[d], dg[d] - base[d], dt[d] - base[d]) for d in (0, 1))
            for lane in range(WARP):
                g, t = lane >> 2, lane % 4
                if any(self.coords[lane][i][d] != form[d][0] + form[d][1] * g + form[d][2] * t for d in (0, 1)):
                    return None
            out.append(form)
        return tuple(out)

    def text(self) -> str:
        """`A m16n8k8.tf32 16x8: lane 4g+t holds a0=(g, t) a1=(g+8, t) ...`, from the table."""
        letter = self.operand.lower()
        head = f"fragment {self.operand} {self.shape.name} {self.rows}x{self.cols}"
        form = self.affine()
        if form is None:
            cells = " ".join(f"{letter}{i}=({r}, {c})" for i, (r, c) in enumerate(self.coords[0]))
            return f"{head}: not affine in the lane; lane 0 holds {cells}"
        cells = " ".join(f"{letter}{i}=({_term(*form[i][0])}, {_term(*form[i][1])})" for i in range(len(form)))
        return f"{head}: lane 4g+t holds {cells}"

    def table(self) -> str:
        """The operand drawn cell by cell: `L<lane>.<element>` where each element lives."""
        cells = [["" for _ in range(self.cols)] for _ in range(self.rows)]
        for (r, c), (lane, i) in sorted(self.lane_of().items()):
            cells[r][c] = f"L{lane}.{self.operand.lower()}{i}"
        w = max(len(x) for row in cells for x in row)
        head = "     " + " ".join(f"{c:>{w}}" for c in range(self.cols))
        return "\n".join([head] + [f"{r:>4} " + " ".join(f"{x:>{w}}" for x in row) for r, row in enumerate(cells)])


def _term(c0: int, cg: int, ct: int) -> str:
    parts = []
    for coef, name in ((cg, "g"), (ct, "t")):
        if coef:
            parts.append(name if coef == 1 else f"{coef}{name}")
    if c0 or not parts:
        parts.append(str(c0))
    return "+".join(parts)


def ptx_layout(shape: MmaShape, operand: str) -> FragmentLayout:
    """The PTX ISA's fragment layout of `operand` for `shape`."""
    if operand not in OPERANDS:
        raise ValueError(f"operand {operand!r}; one of {', '.join(OPERANDS)}")
    n = shape.elements(operand)
    coords = tuple(tuple(_ptx_coord(shape, operand, lane, i) for i in range(n)) for lane in range(WARP))
    return FragmentLayout(shape, operand, coords)


@dataclass(frozen=True)
class LdMatrixLayout:
    """ldmatrix .x`num` (.trans): `sources[lane]` = (matrix, row) whose 16-byte row address
    the lane supplies (None: its address is unused); `receives[lane][reg]` = (matrix, row,
    first unit) of the `width`-byte units the register gets (2 x 16-bit, or 1 x 32-bit):
    units `first`, `first + 1` of that row; with .trans (matrix, first row, unit): the two
    halves are that unit of rows `row` and `row + 1` (a column of the stored matrix)."""
    num: int
    trans: bool
    width: int                      # bytes of one element: 2 (b16) or 4 (a tf32 word)
    sources: tuple[tuple[int, int] | None, ...]
    receives: tuple[tuple[tuple[int, int, int], ...], ...]

    @property
    def per_reg(self) -> int:
        return 4 // self.width

    def ptx(self) -> str:
        return f"ldmatrix.sync.aligned.m8n8.x{self.num}{'.trans' if self.trans else ''}.shared.b16"

    def text(self) -> str:
        unit = "b16" if self.width == 2 else "b32"
        if self.trans:
            return (f"ldmatrix.x{self.num}.trans: lane 8i+r gives row r of matrix i; register i of lane 4g+t "
                    f"gets ({unit}) rows 2t, 2t+1 of column g of matrix i")
        first = "2t, 2t+1" if self.width == 2 else "t"
        return (f"ldmatrix.x{self.num}: lane 8i+r gives row r of matrix i; register i of lane 4g+t gets "
                f"row g, {unit} {first} of matrix i")


def ldmatrix_layout(num: int, trans: bool = False, width: int = 2) -> LdMatrixLayout:
    """PTX's ldmatrix: which lanes give row addresses, which lane receives what."""
    if num not in (1, 2, 4):
        raise ValueError(f"ldmatrix .x{num}; one of .x1, .x2, .x4")
    if width not in (2, 4) or (trans and width != 2):
        raise ValueError(f"ldmatrix of {width}-byte elements{' transposed' if trans else ''}: "
                         "16-bit elements (.trans too) or 32-bit words (not transposed)")
    sources = tuple((lane // 8, lane % 8) if lane < 8 * num else None for lane in range(WARP))
    per = 4 // width
    receives = []
    for lane in range(WARP):
        g, t = lane >> 2, lane % 4
        # (.trans: the unit index is a row and the row a column of the stored matrix)
        receives.append(tuple((i, per * t, g) if trans else (i, g, per * t) for i in range(num)))
    return LdMatrixLayout(num, trans, width, sources, tuple(receives))


@dataclass(frozen=True)
class MmaTile:
    """008 register_tile's tensor-core decision, stamped on the kernel: accumulator `acc` is a
    warps[0] x warps[1] grid of warps, each owning tiles[0] x tiles[1] outputs tiles of m x n
    (its register array acc[tiles[0], tiles[1], 4] holds the C fragments), fed by fragment
    arrays `a` [tiles[0], A registers] and `b` [tiles[1], B registers]; the layouts are the
    lane maps the lowering places addresses and the epilogue by (PTX's, unless planted)."""
    acc: str
    shape: MmaShape
    warps: tuple[int, int]
    tiles: tuple[int, int]
    a: str
    b: str
    layout_a: FragmentLayout
    layout_b: FragmentLayout
    layout_c: FragmentLayout
    lanes: tuple[str, str] = ("", "")    # the THREAD axes g (8) and t (4): lane = 4g + t
    # wgmma (sm_90a): each warpgroup of 4 warps (warps[0] a multiple of 4, warps[1] 1) runs one
    # wgmma.mma_async m64n`wgmma`k16 per k step on operands left in shared memory (no A/B
    # fragments); its D fragment is, warp by warp, the 16 x 8 C layout once per 8 columns
    wgmma: int = 0

    def layout(self, operand: str) -> FragmentLayout:
        return {"A": self.layout_a, "B": self.layout_b, "C": self.layout_c}[operand]

    def fragment_size(self, operand: str) -> int:
        return len(self.layout(operand).coords[0])

    def text(self) -> str:
        (wm, wn), (fm, fn) = self.warps, self.tiles
        s = self.shape
        if self.wgmma:
            head = (f"mma {self.acc}[{fm}, {fn}, {self.fragment_size('C')}]: "
                    f"wgmma.mma_async.sync.aligned.m64n{self.wgmma}k16.f32.{s.dtype}.{s.dtype}, "
                    f"{wm // 4} warpgroups of 64 x {self.wgmma} ({wm} x {wn} warps of {fm * s.m} x {fn * s.n}), "
                    f"operands from shared memory")
            return "\n".join([head, "  " + self.layout_c.text() + " (per 8 columns)"])
        head = (f"mma {self.acc}[{fm}, {fn}, {self.fragment_size('C')}]: {s.ptx()}, {wm} x {wn} warps of "
                f"{fm * s.m} x {fn * s.n}, fragments {self.a}[{fm}, {self.fragment_size('A')}] "
                f"{self.b}[{fn}, {self.fragment_size('B')}]")
        return "\n".join([head] + ["  " + self.layout(op).text() for op in OPERANDS])


def element_lanes(layout: FragmentLayout, i: int) -> tuple[list[int], list[int]]:
    """(rows, cols) over the 32 lanes of element i: where each lane's element i sits."""
    return [layout.coords[lane][i][0] for lane in range(WARP)], [layout.coords[lane][i][1] for lane in range(WARP)]


def ldmatrix_row_lanes(layout: FragmentLayout, along_cols: bool, tiles: int = 1) -> tuple[list[int], list[int]]:
    """(rows, cols) over the 32 lanes of the operand element whose address each lane gives to
    an ldmatrix of `layout`'s registers: lane 8i + r gives row r of matrix i (register i),
    which starts where lane 0's register i does. `along_cols`: the stored rows run along the
    operand's columns (A read along k), else along its rows (B stored n-major). Lanes past
    8 * registers give an address ldmatrix ignores (a valid one: lane % (8 * registers)).
    `tiles` 2: one ldmatrix of two adjacent operand tiles (B: along n, A: along m); the lanes
    past 8 * registers give the second tile's rows."""
    num, per = layout.registers, layout.per_reg
    if num * tiles > 4:
        raise ValueError(f"ldmatrix of {tiles} tiles of {num} registers: more than .x4")
    rows, cols = [], []
    for lane in range(WARP):
        mat, r = (lane % (8 * num)) // 8, lane % 8
        tile = (lane // (8 * num)) % tiles
        r0, c0 = layout.coords[0][mat * per]
        if layout.operand == "B":
            c0 += tile * layout.cols
        else:
            r0 += tile * layout.rows
        rows.append(r0 + r if along_cols else r0)
        cols.append(c0 if along_cols else c0 + r)
    return rows, cols


@dataclass(frozen=True)
class AccumulatorReuse:
    """FlashAttention-2's register reuse: the A fragment of P (m x k) for the P @ V mma is made
    of the C fragments of the k / n score tiles S[:, n*j : n*(j+1)] that the QK^T mma left in
    the same lane, so P never leaves registers (convert FP32 -> half and pack, no shuffles).
    `sources[i]` = (score tile j, C element c) that A element i is read from, in every lane."""
    layout_a: FragmentLayout
    layout_c: FragmentLayout
    sources: tuple[tuple[int, int], ...]

    def text(self) -> str:
        cells = " ".join(f"a{i}=S{j}.c{c}" for i, (j, c) in enumerate(self.sources))
        return (f"P fragment A {self.layout_a.shape.name} <- score accumulators "
                f"S0..S{self.layout_a.cols // self.layout_c.cols - 1} (C {self.layout_c.rows}x{self.layout_c.cols}), "
                f"same lane: {cells}")


def accumulator_reuse(layout_a: FragmentLayout, layout_c: FragmentLayout) -> AccumulatorReuse:
    """Which C element of which score tile each A element of P is, lane by lane, derived from
    the two tables. Raises ValueError when an element of A sits in another lane's C fragment
    (then P would have to cross lanes: shuffles or shared memory), or not at one C element
    index for all lanes (the reuse would not be one register move per element)."""
    if layout_a.rows != layout_c.rows or layout_a.cols % layout_c.cols:
        raise ValueError(f"an A fragment of {layout_a.rows}x{layout_a.cols} is not whole "
                         f"{layout_c.rows}x{layout_c.cols} accumulator tiles")
    c_at = layout_c.lane_of()
    sources = []
    for i in range(len(layout_a.coords[0])):
        held = set()
        for lane in range(WARP):
            r, c = layout_a.coords[lane][i]
            j, col = divmod(c, layout_c.cols)
            src_lane, e = c_at[(r, col)]
            if src_lane != lane:
                raise ValueError(f"A element a{i} of lane {lane} ({r}, {c}) is in lane {src_lane}'s "
                                 f"score tile {j}: P would cross lanes")
            held.add((j, e))
        if len(held) != 1:
            raise ValueError(f"A element a{i} comes from {sorted(held)} across the lanes: not one register")
        sources.append(held.pop())
    return AccumulatorReuse(layout_a, layout_c, tuple(sources))


# -- wgmma (sm_90a): warpgroup-wide m64nNk16 ---------------------------------------------------
# wgmma.mma_async multiplies a 64 x 16 A by a 16 x N B (N a multiple of 8 up to 256), both read
# from shared memory through descriptors, into a 64 x N FP32 accumulator held by the 128
# threads of a warpgroup (PTX ISA "Register Fragments: wgmma .m64nNk16", the D matrix): warp w
# owns rows 16w .. 16w+15, and within those the warp holds the 16 x 8 mma accumulator layout
# once per 8 columns: element i of lane 4g+t is (16w + g + 8 * (i/2 % 2), 8 * (i/4) + 2t + i%2).
WARPGROUP = 128
WGMMA_NS = tuple(range(8, 257, 8))


@dataclass(frozen=True)
class WgmmaAccumulator:
    """The D fragment of wgmma m64n`n`k16: coords[thread][i] = (row, col) of element i of
    thread `thread` (0..127) of the warpgroup, in register i of its accumulator array."""
    n: int
    coords: tuple[tuple[tuple[int, int], ...], ...]

    @property
    def registers(self) -> int:
        return len(self.coords[0])

    def text(self) -> str:
        return (f"fragment D wgmma m64n{self.n}k16 64x{self.n}: thread 32w + 4g + t holds "
                + " ".join(f"d{i}={self.coords[0][i]}" for i in range(min(4, self.registers)))
                + " ... at (row + 16w + g, col + 2t)")


def wgmma_accumulator(n: int) -> WgmmaAccumulator:
    """PTX's D fragment of wgmma m64nNk16 with an FP32 accumulator."""
    if n not in WGMMA_NS:
        raise ValueError(f"wgmma m64n{n}k16: N is a multiple of 8 from 8 to 256")
    coords = []
    for thread in range(WARPGROUP):
        w, lane = divmod(thread, WARP)
        g, t = lane >> 2, lane % 4
        coords.append(tuple((16 * w + g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * t + (i & 1))
                            for i in range(n // 2)))
    return WgmmaAccumulator(n, tuple(coords))


# The shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"), 64 bits: start
# address >> 4 (bits 0..13), leading byte offset >> 4 (16..29), stride byte offset >> 4
# (32..45), base offset (49..51, 0 here: swizzled tiles start on a repeat of their pattern),
# swizzle mode (62..63).
DESCRIPTOR_SWIZZLE_MODE = {0: 0, 128: 1, 64: 2, 32: 3}
DESCRIPTOR_SWIZZLE_SPAN = {v: k for k, v in DESCRIPTOR_SWIZZLE_MODE.items()}


def descriptor_bits(leading_bytes: int, stride_bytes: int, swizzle: int) -> int:
    """A descriptor's fields but its start address (which only the running kernel knows)."""
    for what, v in (("leading", leading_bytes), ("stride", stride_bytes)):
        if v % 16 or not 0 <= v >> 4 < 1 << 14:
            raise ValueError(f"wgmma descriptor: {what} byte offset {v} is not a multiple of 16 below 256 KiB")
    if swizzle not in DESCRIPTOR_SWIZZLE_MODE:
        raise ValueError(f"wgmma descriptor: swizzle {swizzle}; supported: {sorted(DESCRIPTOR_SWIZZLE_MODE)}")
    return (leading_bytes >> 4) << 16 | (stride_bytes >> 4) << 32 | DESCRIPTOR_SWIZZLE_MODE[swizzle] << 62


def descriptor_fields(desc):
    """(start, leading, stride) in bytes and the swizzle mode of descriptor(s) `desc` (ints or
    uint64 numpy arrays)."""
    return ((desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4, (desc >> 62) & 3)


def mnmajor_byte(mn, k, leading, stride, span: int):
    """Byte offset, before swizzling, of element (mn, k) of an MN-major tile of 2-byte elements
    (a row-major K x N B: the descriptor's transpose bit) that a swizzled descriptor describes:
    rows along K `span` bytes apart, each holding span / 2 consecutive MN elements; 8-row
    groups along K `stride` bytes apart; the next span / 2 MN elements `leading` bytes on."""
    if not span:
        raise ValueError("an MN-major wgmma operand is read through a swizzle (32, 64 or 128 bytes)")
    per = span // 2
    return (mn // per) * leading + (k // 8) * stride + (k % 8) * span + (mn % per) * 2


def kmajor_byte(row, k, leading, stride, span: int):
    """Byte offset, before swizzling, of element (row, k) of a K-major tile of 2-byte elements
    that a descriptor describes: 8-row groups `stride` bytes apart; within a group, swizzled
    rows are `span` bytes (a K step of 16 halves, 32 bytes, fits in any span), unswizzled
    ones are 8 x 16-byte core matrices `leading` bytes apart along K."""
    if span:
        return (row // 8) * stride + (row % 8) * span + k * 2
    return (row // 8) * stride + (k // 8) * leading + (row % 8) * 16 + (k % 8) * 2
