"""The tensor cores' instructions printed as CUDA (inline PTX): the Kernel-IR statements
LdMatrix, Tf32Round and Mma, each a function taking the renderer (passes/lower/cuda.py's
_Renderer, whose FEATURE_STATEMENTS table dispatches here) as its first argument.
Fragments live in float register arrays; the instructions take their bits as .b32
registers (__float_as_uint / __uint_as_float move no data)."""
from __future__ import annotations

from ...ir.fragments import SHAPES as MMA_SHAPES
from ...ir.kernel_ir import Binary, Const, LdMatrix, Mma, Tf32Round


def reg_at(r, array: str, at, i: int, scope) -> str:
    return f"{array}[{r.expr(Binary('+', at, Const(i, 'int')) if i else at, scope)}]"


def render_ldmatrix(r, s: LdMatrix, scope) -> None:
    r.need_sm(80, "ldmatrix")
    if s.num not in (1, 2, 4):
        raise r.err(f"ldmatrix .x{s.num}; supported: .x1, .x2, .x4")
    regs = [r.fresh("lm") for _ in range(s.num)]
    addr = r.shared_addr(f"{s.array}[{r.expr(s.offset, scope)}]")
    ops = ", ".join(f"%{i}" for i in range(s.num))
    r.emit("{")
    r.depth += 1
    r.emit(f"unsigned {', '.join(regs)};")
    outs = ", ".join(f'"=r"({reg})' for reg in regs)
    r.emit(f'asm volatile("ldmatrix.sync.aligned.m8n8.x{s.num}{".trans" if s.trans else ""}.shared.b16 '
           f'{{{ops}}}, [%{s.num}];\\n" : {outs} : "r"({addr}));')
    for i, reg in enumerate(regs):
        r.emit(f"{reg_at(r, s.dst, s.index, i, scope)} = __uint_as_float({reg});")
    r.depth -= 1
    r.emit("}")


def render_tf32_round(r, s: Tf32Round, scope) -> None:
    r.need_sm(80, "cvt.rna.tf32.f32")
    at, u = reg_at(r, s.dst, s.index, 0, scope), r.fresh("tf")
    r.emit(f'{{ unsigned {u}; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"({u}) : "f"({at})); '
           f'{at} = __uint_as_float({u}); }}')


def render_mma(r, s: Mma, scope) -> None:
    r.need_sm(80, "mma.sync")
    shape = MMA_SHAPES.get(s.shape)
    if shape is None:
        raise r.err(f"mma shape {s.shape!r}; supported: {', '.join(MMA_SHAPES)}")
    na, nb = shape.elements("A") // shape.per_reg, shape.elements("B") // shape.per_reg
    if shape.per_reg != 1:
        raise r.err(f"mma {s.shape}: packed 16-bit fragments are not rendered yet")
    n = 4 + na + nb
    groups = [range(0, 4), range(4, 4 + na), range(4 + na, n)]
    ops = ", ".join("{" + ", ".join(f"%{i}" for i in g) + "}" for g in groups)
    r.emit(f'asm("{shape.ptx()} {ops}, {{%0, %1, %2, %3}};\\n"')
    outs = ", ".join(f'"+f"({reg_at(r, s.acc, s.acc_at, i, scope)})' for i in range(4))
    ins = [f'"r"(__float_as_uint({reg_at(r, s.a, s.a_at, i, scope)}))' for i in range(na)]
    ins += [f'"r"(__float_as_uint({reg_at(r, s.b, s.b_at, i, scope)}))' for i in range(nb)]
    r.emit(f"    : {outs}")
    r.emit(f"    : {', '.join(ins)});")
