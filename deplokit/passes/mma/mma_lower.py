"""Tensor-core statements (008's MmaTile) spelled in Kernel IR: fragment loads as ldmatrix or
one shared load per element, each element rounded to tf32; mma.sync over register arrays. A
16-bit (bf16/f16) fragment is an array of 32-bit registers of two halves each, filled by ldmatrix.

Every lane's addresses come from the layouts stamped on the kernel (MmaTile.layout_a/_b), not
from PTX's tables: the lane's row or element is a table over the 32 lanes, written as an index
expression of the lane's bits (lane = 4g + t, g and t the Tile's lane axes). PTX's tables are
linear in those bits, so the expression is short (`g`, `t + 4`); a table that is not is refused.
What each lane then receives is PTX's business: the simulator applies PTX's ldmatrix and mma
tables (deplokit.runtime.warp_mma), so an address placed by a wrong layout loads the wrong
element and the product is wrong there as on the GPU."""
from __future__ import annotations

from ...errors import DeplokitError
from ...ir import kernel_ir as K
from ...ir.fragments import WARP, element_lanes, ldmatrix_row_lanes
from ...ir.index import Affine, const, floordiv, free_vars, mod, substitute, var
from ...ir.kernel_expr import affine_expr
from ...ir.kernel_mma import LdMatrix, Mma, Tf32Round
from ...ir.smem_layout import smem_offset
from ...ir.tile_mma import FragmentLoad, MmaSync

FR, FC = "fr", "fc"
PACKED = "b32"          # a register array of 32-bit words, each two halves (low: the first)


def declarations(kernel) -> list:
    """The fragment arrays of an MmaTile kernel (its accumulator is declared with the reduce)."""
    st = kernel.mma
    if st is None or st.wgmma:         # wgmma reads both operands from shared memory
        return []
    (fm, fn) = st.tiles
    if st.shape.per_reg == 2:         # 16-bit operands: 32-bit registers of two packed halves
        return [K.DeclareArray(st.a, fm * registers(st, "A"), 0, PACKED),
                K.DeclareArray(st.b, fn * registers(st, "B"), 0, PACKED)]
    return [K.DeclareArray(st.a, fm * st.fragment_size("A")), K.DeclareArray(st.b, fn * st.fragment_size("B"))]


def registers(st, operand: str) -> int:
    """32-bit registers of one fragment of `operand` (elements / elements per register)."""
    return st.fragment_size(operand) // st.layout(operand).per_reg


def lane_expr(values, g: str, t: str) -> Affine:
    """values[lane] (32 ints) as an expression of the lane's bits: t is bits 0-1, g bits 2-4."""
    base = values[0]
    deltas = [values[1 << k] - base for k in range(5)]
    for lane in range(WARP):
        if values[lane] != base + sum(d for k, d in enumerate(deltas) if lane >> k & 1):
            raise DeplokitError(f"a fragment layout that is not linear in the lane's bits ({list(values)})")
    ranges = {g: 8, t: 4}
    out = const(base)
    for name, ds in ((t, deltas[:2]), (g, deltas[2:])):
        if all(d == ds[0] << i for i, d in enumerate(ds)):
            out = out + var(name) * ds[0]             # c * t, c * g
            continue
        for i, d in enumerate(ds):
            if d:
                out = out + mod(floordiv(var(name), 1 << i, ranges), 2, ranges) * d
    return out


def _along(at) -> str:
    inner = free_vars(at[-1])
    return FC if FC in inner else FR


def lower_fragment_load(state, s: FragmentLoad) -> list:
    st = state.kernel.mma
    lay = st.layout(s.operand)
    g, t = st.lanes
    stage = state.stages[s.stage]
    size = registers(st, s.operand)              # the fragment array holds registers
    slot = affine_expr(s.index[0])
    tf32 = st.shape.dtype == "tf32"

    def offset(rows, cols):
        at = [substitute(e, {FR: lane_expr(rows, g, t), FC: lane_expr(cols, g, t)}, {g: 8, t: 4}) for e in s.at]
        return smem_offset([affine_expr(e) for e in at], stage)

    def element(i):
        return K.Binary("+", K.Binary("*", slot, K.Const(size, "int")), K.Const(i, "int"))

    out: list = []
    if s.via.startswith("ldmatrix"):
        num, trans = lay.registers * s.tiles, s.via.endswith(".trans")
        rows, cols = ldmatrix_row_lanes(lay, _along(s.at) == FC, s.tiles)
        out.append(LdMatrix(s.dst, element(0), num, trans, stage.name, offset(rows, cols)))
        regs = range(num * lay.per_reg) if tf32 else ()
    else:
        if not tf32:
            raise DeplokitError(f"{s.operand} fragment of {st.shape.name} read by {s.via}: packed 16-bit "
                                "registers are filled by ldmatrix only")
        for i in range(size):
            out.append(K.Assign(s.dst, K.SharedLoad(stage.name, offset(*element_lanes(lay, i))), element(i)))
        regs = range(size) if tf32 else ()
    out += [Tf32Round(s.dst, element(i)) for i in regs]
    return out


def lower_mma(state, s: MmaSync) -> list:
    st = state.kernel.mma
    zero = (const(0),)
    acc = state.register_index(st.acc, s.index + zero)
    na, nb = registers(st, "A"), registers(st, "B")
    a = K.Binary("*", affine_expr(s.a_index[0]), K.Const(na, "int"))
    b = K.Binary("*", affine_expr(s.b_index[0]), K.Const(nb, "int"))
    return [Mma(st.shape.name, st.acc, acc, st.a, a, st.b, b)]


# Tile-IR statement -> the function that lowers it (k001_materialize's FEATURE_STATEMENTS)
LOWERINGS = {FragmentLoad: lower_fragment_load, MmaSync: lower_mma}
