"""The tensor cores' instructions printed as CUDA (inline PTX): the Kernel-IR statements
LdMatrix, Tf32Round and Mma, each a function taking the renderer (passes/lower/cuda.py's
_Renderer, here `rd`, whose FEATURE_STATEMENTS table merges this module's STATEMENTS) as its
first argument.
Fragments live in float register arrays; the instructions take their bits as .b32
registers (__float_as_uint / __uint_as_float move no data)."""
from __future__ import annotations

from ...ir.fragments import SHAPES as MMA_SHAPES
from ...ir.kernel_ir import Binary, Const
from ...ir.kernel_mma import LdMatrix, Mma, PackHalves, Tf32Round


def reg_at(rd, array: str, at, i: int, scope) -> str:
    return f"{array}[{rd.expr(Binary('+', at, Const(i, 'int')) if i else at, scope)}]"


def render_ldmatrix(rd, s: LdMatrix, scope) -> None:
    rd.need_sm(80, "ldmatrix")
    if s.num not in (1, 2, 4):
        raise rd.err(f"ldmatrix .x{s.num}; supported: .x1, .x2, .x4")
    regs = [rd.fresh("lm") for _ in range(s.num)]
    addr = rd.shared_addr(f"{s.array}[{rd.expr(s.offset, scope)}]")
    ops = ", ".join(f"%{i}" for i in range(s.num))
    rd.emit("{")
    rd.depth += 1
    rd.emit(f"unsigned {', '.join(regs)};")
    outs = ", ".join(f'"=r"({r})' for r in regs)
    rd.emit(f'asm volatile("ldmatrix.sync.aligned.m8n8.x{s.num}{".trans" if s.trans else ""}.shared.b16 '
            f'{{{ops}}}, [%{s.num}];\\n" : {outs} : "r"({addr}));')
    packed = scope.lookup(s.dst) == "regs:b32"          # 16-bit fragments: the bits as they are
    for i, reg in enumerate(regs):
        rd.emit(f"{reg_at(rd, s.dst, s.index, i, scope)} = {reg if packed else f'__uint_as_float({reg})'};")
    rd.depth -= 1
    rd.emit("}")


def render_tf32_round(rd, s: Tf32Round, scope) -> None:
    rd.need_sm(80, "cvt.rna.tf32.f32")
    at, u = reg_at(rd, s.dst, s.index, 0, scope), rd.fresh("tf")
    rd.emit(f'{{ unsigned {u}; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"({u}) : "f"({at})); '
            f'{at} = __uint_as_float({u}); }}')


def render_mma(rd, s: Mma, scope) -> None:
    rd.need_sm(80, "mma.sync")
    shape = MMA_SHAPES.get(s.shape)
    if shape is None:
        raise rd.err(f"mma shape {s.shape!r}; supported: {', '.join(MMA_SHAPES)}")
    na, nb = shape.elements("A") // shape.per_reg, shape.elements("B") // shape.per_reg
    if shape.per_reg != 1 and not (scope.lookup(s.a) == scope.lookup(s.b) == "regs:b32"):
        raise rd.err(f"mma {s.shape}: 16-bit fragments live in packed registers (b32 arrays)")
    n = 4 + na + nb
    groups = [range(0, 4), range(4, 4 + na), range(4 + na, n)]
    ops = ", ".join("{" + ", ".join(f"%{i}" for i in g) + "}" for g in groups)
    rd.emit(f'asm("{shape.ptx()} {ops}, {{%0, %1, %2, %3}};\\n"')
    outs = ", ".join(f'"+f"({reg_at(rd, s.acc, s.acc_at, i, scope)})' for i in range(4))
    bits = "{}" if shape.per_reg != 1 else "__float_as_uint({})"      # packed halves: already bits
    ins = [f'"r"({bits.format(reg_at(rd, s.a, s.a_at, i, scope))})' for i in range(na)]
    ins += [f'"r"({bits.format(reg_at(rd, s.b, s.b_at, i, scope))})' for i in range(nb)]
    rd.emit(f"    : {outs}")
    rd.emit(f"    : {', '.join(ins)});")


def render_pack_halves(rd, s: PackHalves, scope) -> None:
    rd.need_sm(80, f"cvt.rn.{s.kind}x2.f32")
    if s.kind not in ("bf16", "f16"):
        raise rd.err(f"pack of {s.kind!r}; bf16 or f16")
    at = reg_at(rd, s.dst, s.index, 0, scope)
    # cvt's first source goes to the upper half
    rd.emit(f'asm("cvt.rn.{s.kind}x2.f32 %0, %1, %2;" : "=r"({at}) : "f"({rd.expr(s.hi, scope)}), '
            f'"f"({rd.expr(s.lo, scope)}));')


# Kernel-IR statement -> the function that prints it (passes/lower/cuda.py's FEATURE_STATEMENTS)
STATEMENTS = {
    LdMatrix: render_ldmatrix, Tf32Round: render_tf32_round, Mma: render_mma, PackHalves: render_pack_halves,
}
