"""Kernel IR as text: a terse pseudo-C naming each primitive (global/shared loads, barrier,
shfl_xor, cp.async ...), lower than Tile IR but without CUDA's spelling. Nodes are told
apart by their class name, so this module needs none of deplokit.ir.kernel_ir's classes
(which print through it)."""
from __future__ import annotations

from .types import format_scalar

_INFIX = {"+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||", "&", "|", "^", "<<", ">>"}


def format_expr(e) -> str:
    kind = type(e).__name__
    if kind == "Var":
        return e.name
    if kind == "Const":
        return format_scalar(e.value)
    if kind == "Special":
        return e.name
    if kind == "Binary":
        if e.op in _INFIX:
            return f"({format_expr(e.a)} {e.op} {format_expr(e.b)})"
        return f"{e.op}({format_expr(e.a)}, {format_expr(e.b)})"
    if kind == "Cast":
        return f"{e.ctype}({_strip(format_expr(e.a))})"
    if kind == "Unary":
        return f"{e.op}({format_expr(e.a)})"
    if kind == "Call":
        return f"{e.fn}({', '.join(format_expr(a) for a in e.args)})"
    if kind == "Select":
        return f"select({format_expr(e.cond)}, {format_expr(e.a)}, {format_expr(e.b)})"
    if kind == "GlobalLoad":
        return f"global {_at(e.buffer, e.offset)}"
    if kind == "SharedLoad":
        return f"shared {_at(e.array, e.offset)}"
    if kind == "Shuffle":
        return f"shfl_xor({format_expr(e.value)}, {e.lane_mask})"
    if kind == "RegLoad":
        return _at(e.array, e.index)
    raise TypeError(e)


def _strip(text: str) -> str:
    return text[1:-1] if text.startswith("(") and text.endswith(")") and text.count("(") == 1 else text


def _e(e) -> str:
    return _strip(format_expr(e))


def _at(array: str, offset) -> str:
    """array[offset], as every memory access prints."""
    return f"{array}[{_e(offset)}]"


def _copy(s) -> str:
    """What an asynchronous copy moves (cp.async, TMA): shared X[dst] <- global Y[src]."""
    return f"shared {_at(s.array, s.dst_offset)} <- global {_at(s.buffer, s.src_offset)}"


def _mbar(name: str, slot) -> str:
    return name if slot is None else f"{name}[{_e(slot)}]"


def format_stmts(body, depth: int, lines: list[str]) -> None:
    pad = "    " * depth
    for s in body:
        kind = type(s).__name__
        if kind == "Declare":
            init = "" if s.init is None else f" = {_strip(format_expr(s.init))}"
            lines.append(f"{pad}{s.ctype} {s.name}{init}")
        elif kind == "DeclareArray":
            lines.append(f"{pad}{s.ctype} {s.name}[{s.size}] = {{{s.init}}}")
        elif kind == "Assign":
            idx = "" if s.index is None else f"[{_strip(format_expr(s.index))}]"
            lines.append(f"{pad}{s.name}{idx} = {_strip(format_expr(s.value))}")
        elif kind == "SharedArray":
            where = f"  # dynamic smem + {s.offset}" if s.offset is not None else ""
            lines.append(f"{pad}shared {s.ctype} {s.name}[{s.size}]{where}")
        elif kind == "GlobalStore":
            lines.append(f"{pad}global {_at(s.buffer, s.offset)} = {_e(s.value)}")
        elif kind == "AtomicAdd":
            lines.append(f"{pad}atomic global {_at(s.buffer, s.offset)} += {_e(s.value)}")
        elif kind == "SharedStore":
            lines.append(f"{pad}shared {_at(s.array, s.offset)} = {_e(s.value)}")
        elif kind == "VectorLoad":
            lines.append(f"{pad}{', '.join(s.dsts)} = {s.space} float4 {_at(s.source, s.offset)}")
        elif kind == "VectorStore":
            vals = ", ".join(format_expr(v) for v in s.values)
            lines.append(f"{pad}{s.space} float4 {_at(s.target, s.offset)} = ({vals})")
        elif kind == "For":
            unroll = "  # unroll" if s.unroll else ""
            lines.append(f"{pad}for {s.var} = {_strip(format_expr(s.start))}; < {_strip(format_expr(s.stop))}; "
                         f"+= {_strip(format_expr(s.step))}:{unroll}")
            format_stmts(s.body, depth + 1, lines)
        elif kind == "If":
            lines.append(f"{pad}if {_strip(format_expr(s.cond))}:")
            format_stmts(s.then, depth + 1, lines)
            if s.orelse:
                lines.append(f"{pad}else:")
                format_stmts(s.orelse, depth + 1, lines)
        elif kind == "Barrier":
            lines.append(f"{pad}barrier")
        elif kind == "SyncWarp":
            lines.append(f"{pad}syncwarp")
        elif kind == "CpAsync":
            lines.append(f"{pad}cp.async {s.nbytes}B {_copy(s)}")
        elif kind == "CpAsyncCommit":
            lines.append(f"{pad}cp.async.commit")
        elif kind == "CpAsyncWait":
            lines.append(f"{pad}cp.async.wait {s.pending}")
        elif kind == "TmaLoad":
            lines.append(f"{pad}tma {s.count} floats {_copy(s)} on {_mbar(s.barrier, s.slot)}")
        elif kind == "TmaTensorLoad":
            at = ", ".join(_strip(format_expr(c)) for c in s.coords)
            lines.append(f"{pad}tma box shared {s.array}[{_strip(format_expr(s.dst_offset))}] <- "
                         f"{s.tensor_map}[{at}] on {_mbar(s.barrier, s.slot)}")
        elif kind == "MbarrierInit":
            slots = f"[{s.slots}]" if s.slots != 1 else ""
            lines.append(f"{pad}mbarrier.init {s.name}{slots} count {s.count}")
        elif kind == "MbarrierArrive":
            tx = f" expect_tx {s.expect_tx} bytes" if s.expect_tx else ""
            lines.append(f"{pad}mbarrier.arrive {_mbar(s.name, s.slot)}{tx}")
        elif kind == "ProxyFence":
            lines.append(f"{pad}fence.proxy.async")
        elif kind == "MbarrierWait":
            lines.append(f"{pad}mbarrier.wait {_mbar(s.name, s.slot)} phase {format_expr(s.phase)}")
        elif kind == "Comment":
            lines.append(f"{pad}// {s.text}")
        elif callable(getattr(s, "text", None)):      # a statement pending a later pass (kernel_stage.py)
            lines.append(pad + s.text())
        else:
            raise TypeError(s)


def format_kernel(k: KernelFunc) -> str:
    lines = [f"=== {k.name} grid={k.grid} block={k.block} ==="]
    if k.index_bits != 32:
        lines.append(f"# {k.index_bits}-bit index arithmetic")
    if k.zero_init_for:
        lines.append(f"# zero-init for {k.zero_init_for}")
    if k.reduces_for:
        lines.append(f"# adds up the split-K partial sums of {k.reduces_for}")
    if k.repacks_for:
        lines.append(f"# repacks an operand of {k.repacks_for} into 16-byte rows")
    if k.dynamic_smem:
        lines.append(f"# dynamic shared memory: {k.dynamic_smem} bytes")
    for p in k.params:
        lines.append(f"# param {p.name}: {'const ' if p.const else ''}{p.ctype}[{p.size}]")
    for t in k.tensor_maps:
        swz = f", swizzle {t.swizzle}B" if t.swizzle else ""
        lines.append(f"# param {t.name}: tensor map of {t.buffer}{list(t.shape)}, box {list(t.box)}{swz}")
    if k.registers is not None:
        lines.append(f"# ptxas: {k.registers} registers, {k.smem_bytes} bytes smem, {k.spills} bytes spilled")
    format_stmts(k.body, 0, lines)
    return "\n".join(lines)
