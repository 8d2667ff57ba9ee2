"""TMA copies and mbarriers printed as CUDA (inline PTX): the Kernel-IR statements of
ir/kernel_tma.py (TmaLoad, TmaTensorLoad, MbarrierInit, MbarrierArrive, MbarrierWait and
ProxyFence), and the kernel preamble's mbarriers and tensor-map parameters. Each is a
function taking the renderer (passes/lower/cuda.py's _Renderer, whose FEATURE_STATEMENTS
table merges STATEMENTS below) as its first argument; the renderer calls the others at its
hooks: the target check, the flattened thread id an election needs, the tensor-map
parameters, the preamble's mbarriers, the pinned address after a shared array, an
elected If's condition, and the translation unit's declarations.

* The copies are inline PTX, so the instruction issued is on the page: TMA tensor-map copies
  `cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes` (N = the
  map's rank, coordinates innermost first; the kernel takes each map as a
  `const __grid_constant__ deplokit_tensor_map` parameter after its buffers, the 128-byte
  layout of cuda.h's CUtensorMap declared once per translation unit) and 1-D bulk copies
  `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`, completing on an
  mbarrier (`mbarrier.init` / `mbarrier.arrive.expect_tx` / `mbarrier.try_wait.parity`),
  sm_90+ (plain sm_90, no `sm_90a` needed; sm_120 accepts them too). Rendering one of them
  for a target that lacks it raises ValueError.
* TMA and mbarrier semantics. Every mbarrier named by an `MbarrierInit` is a shared
  `unsigned long long`, declared at the top of the kernel. `MbarrierInit`, `TmaLoad` and
  `TmaTensorLoad` are issued by one thread: where they stand outside any `If` (every thread of the block reaches
  them) the printer guards them with `if (<flat thread id> == 0)`; inside an `If`, that
  `If`'s condition is the election and must select one thread. Each `TmaLoad` and
  `TmaTensorLoad` is one arrival (with its byte count, the box's for a tensor copy, as the
  transaction count), so an mbarrier expects as many arrivals per phase
  (`MbarrierInit.count`) as copies complete on it. Other threads may use an
  mbarrier only after a `Barrier` that follows its `MbarrierInit`. `MbarrierWait` is
  executed by every thread that reaches it; its phase prints as `phase & 1` (the parity).
"""
from __future__ import annotations

from ...ir.kernel_ir import Binary, Const, If, SharedArray, Special, walk_stmts
from ...ir.kernel_tma import MbarrierArrive, MbarrierInit, MbarrierWait, ProxyFence, TmaLoad, TmaTensorLoad
from ...ir.types import ctype_bytes

TENSOR_MAP_TYPE = "deplokit_tensor_map"
TENSOR_MAP_DECL = (f"// the layout of cuda.h's CUtensorMap: a tensor map the host encodes "
                   f"(cuTensorMapEncodeTiled), passed by value\n"
                   f"struct alignas(64) {TENSOR_MAP_TYPE} {{ unsigned long long opaque[16]; }};\n")


# the one-thread election of a TMA producer (sm_90): elect.sync in a converged warp 0; ptxas
# then issues the producer's copies once, with no loop over the warp's distinct operands
ELECT_DECL = (
    "// one lane of the calling (converged) warp: the issuer of a TMA producer's copies\n"
    "__device__ __forceinline__ bool deplokit_elect_one() {\n"
    "    unsigned elected;\n"
    '    asm volatile("{\\n .reg .pred e;\\n elect.sync _|e, 0xffffffff;\\n selp.u32 %0, 1, 0, e;\\n}\\n" : "=r"(elected));\n'  # noqa: E501 (one line of C)
    "    return elected != 0;\n"
    "}\n"
)


def elects(k, sm: int) -> bool:
    """Kernel k's one-thread TMA issue is spelled with deplokit_elect_one (ELECT_DECL) on sm."""
    return sm >= 90 and any(isinstance(s, If) and s.elect for s in walk_stmts(k.body))


def _elected_warp(e) -> int | None:
    """w for a condition tid.x == 32 w (thread 0, or a producer warpgroup's first thread), else None."""
    if (isinstance(e, Binary) and e.op == "==" and e.a == Special("tid.x")
            and isinstance(e.b, Const) and int(e.b.value) % 32 == 0):
        return int(e.b.value) // 32
    return None


# statements one elected thread runs (the renderer guards them where every thread reaches them)
ONE_THREAD = (TmaLoad, TmaTensorLoad, MbarrierInit, MbarrierArrive)


def needs_election(nodes) -> bool:
    """Whether a kernel of these nodes has statements one thread issues: the renderer then
    needs the flattened thread id to guard them."""
    return any(isinstance(n, ONE_THREAD) for n in nodes)


def check_target(r, nodes) -> None:
    """TMA copies (and any tensor-map parameter) need sm_90, checked before anything prints."""
    if r.k.tensor_maps or any(isinstance(n, TmaLoad) for n in nodes):
        r.need_sm(90, "TMA (cp.async.bulk)")


def pinned_addr(r, var: str, ref: str, why: str) -> None:
    """`unsigned var`: the shared address of `ref`, computed once and kept in a register:
    passed through an (empty) asm so that nvcc cannot recompute it (S2R SR_CgaCtaId and
    a LEA) at each use in the K loop."""
    r.emit(f"unsigned {var};  // {why}")
    r.emit_asm(["mov.u32 %0, %1;"], [f'"r"({r.shared_addr(ref)})'], [f'"=r"({var})'], volatile=False)


def elected_cond(r, s: If, scope) -> str:
    """The condition of an If that picks the one issuing thread (If.elect): warp 0 (or the
    elected thread's warp) elects one lane on sm_90 (the copies' operands are the same for every thread)."""
    w = _elected_warp(s.cond)
    if r.sm < 90 or w is None:
        return r.expr(s.cond, scope)
    if w:                     # a producer warpgroup's first warp
        return f"{r.flat_tid} / 32 == {w} && deplokit_elect_one()"
    return f"{r.flat_tid} < 32 && deplokit_elect_one()"


def tma_destinations(r) -> set:
    if r.tma_arrays is None:
        arrays = dict.fromkeys(n.array for n in walk_stmts(r.k.body) if isinstance(n, TmaTensorLoad))
        r.tma_arrays = {a: r.fresh(f"{a}_addr") for a in arrays}
    return r.tma_arrays


def declare_tma_destination(r, s: SharedArray) -> None:
    """After a shared array that tensor-map copies fill: its shared address, kept."""
    var = tma_destinations(r).get(s.name)
    if var:
        pinned_addr(r, var, f"{s.name}[0]", "the shared address tensor-map copies fill from")


def guarded(r, why: str) -> bool:
    """Open `if (thread 0)` around a one-thread statement that every thread reaches."""
    if r.if_depth:
        return False
    r.emit(f"if ({r.flat_tid} == 0) {{  // {why}")
    r.depth += 1
    return True


def close_guard(r, opened: bool) -> None:
    if opened:
        r.depth -= 1
        r.emit("}")


def declare_mbarriers(r, scope) -> None:
    """The preamble's mbarriers (an array of them for a ring's slots), before any float
    array, each with a variable holding its shared address."""
    inits: dict[str, int] = {}
    for n in walk_stmts(r.k.body):
        if isinstance(n, MbarrierInit) and n.name not in r.mbarriers:
            r.need_sm(90, "mbarrier (Kernel IR completes mbarriers with TMA)")
            r.mbarriers[n.name] = r.fresh(f"{n.name}_addr")
            inits[n.name] = n.slots
    r.smem_bytes = 8 * sum(inits.values())
    for name, slots in inits.items():
        if slots == 1:
            r.emit(f"__shared__ __align__(8) unsigned long long {name};  // mbarrier")
            pinned_addr(r, r.mbarriers[name], name, "its shared address")
        else:
            r.emit(f"__shared__ __align__(8) unsigned long long {name}[{slots}];  // one mbarrier per slot")
            pinned_addr(r, r.mbarriers[name], name + "[0]", "their shared address")
        scope.declare(name, "mbarrier")


def mbarrier(r, name: str, slot=None, scope=None) -> str:
    """The shared address of mbarrier `name` (of name[slot] in an array of them)."""
    if name not in r.mbarriers:
        raise r.err(f"mbarrier {name!r} is used but no MbarrierInit declares it")
    addr = r.mbarriers[name]
    if slot is None or (isinstance(slot, Const) and int(slot.value) == 0):
        return addr
    if isinstance(slot, Const):
        return f"{addr} + {8 * int(slot.value)}"
    return f"{addr} + 8 * ({r.expr(slot, scope)})"


def render_tma_load(r, s: TmaLoad, scope) -> None:
    r.need_sm(90, "TMA (cp.async.bulk)")
    nbytes = 4 * s.count
    if s.count <= 0 or nbytes % 16:
        raise r.err(f"TMA bulk copy of {s.count} floats ({nbytes} bytes): the size must be a "
                    f"positive multiple of 16 bytes")
    r.float_param(s.buffer, "TMA copy")
    bar = mbarrier(r, s.barrier, s.slot, scope)
    dst = r.shared_addr(f"{s.array}[{r.expr(s.dst_offset, scope)}]")
    src = f"&{s.buffer}[{r.expr(s.src_offset, scope)}]"
    opened = guarded(r, "one thread issues the bulk copy")
    if s.expect:
        r.emit(f"// {s.barrier} expects {nbytes} more bytes this phase; the copy completes them")
        r.emit_asm(["mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;"],
                   [f'"r"({bar})', f'"r"({nbytes})'])
    r.emit_asm(["cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"],
               [f'"r"({dst})', f'"l"({src})', f'"r"({nbytes})', f'"r"({bar})'])
    close_guard(r, opened)


def tensor_map_params(r, scope) -> list[str]:
    """The kernel's tensor maps as parameters, after its buffers, passed by value."""
    for t in r.k.tensor_maps:
        scope.declare(t.name, "param")
    return [f"const __grid_constant__ {TENSOR_MAP_TYPE} {t.name}" for t in r.k.tensor_maps]


def render_tma_tensor_load(r, s: TmaTensorLoad, scope) -> None:
    r.need_sm(90, "TMA (cp.async.bulk.tensor)")
    try:
        tmap = r.k.tensor_map(s.tensor_map)
    except KeyError:
        raise r.err(f"TMA copy through tensor map {s.tensor_map!r}, which is no tensor-map parameter "
                    f"of the kernel") from None
    rank = len(tmap.box)
    if not 1 <= rank <= 5 or len(s.coords) != rank:
        raise r.err(f"TMA copy through {s.tensor_map} with {len(s.coords)} coordinates; the map has "
                    f"rank {rank} (1 to 5)")
    bar = mbarrier(r, s.barrier, s.slot, scope)
    base = tma_destinations(r)[s.array]
    nbytes = ctype_bytes((scope.lookup(s.array) or "shared:float").split(":")[-1])
    if isinstance(s.dst_offset, Const):
        dst = f"{base} + {nbytes * int(s.dst_offset.value)}" if int(s.dst_offset.value) else base
    else:
        dst = f"{base} + {nbytes} * ({r.expr(s.dst_offset, scope)})"
    coords = [r.expr(c, scope) for c in reversed(s.coords)]      # PTX: innermost first
    opened = guarded(r, "one thread issues the tensor-map copy")
    if s.expect:
        r.emit(f"// {s.barrier} expects the box's {tmap.box_bytes} bytes this phase; the copy completes them")
        r.emit_asm(["mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;"],
                   [f'"r"({bar})', f'"r"({tmap.box_bytes})'])
    at = ", ".join(f"%{3 + i}" for i in range(rank))
    r.emit_asm([f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes"
                f" [%0], [%1, {{{at}}}], [%2];"],
               [f'"r"({dst})', f'"l"(reinterpret_cast<unsigned long long>(&{tmap.name}))', f'"r"({bar})']
               + [f'"r"({c})' for c in coords])
    close_guard(r, opened)


def render_proxy_fence(r, s: ProxyFence, scope) -> None:
    r.need_sm(90, "fence.proxy.async")
    r.emit_asm(["fence.proxy.async.shared::cta;"], [])


def render_mbarrier_init(r, s: MbarrierInit, scope) -> None:
    r.need_sm(90, "mbarrier (Kernel IR completes mbarriers with TMA)")
    if not (isinstance(s.count, int) and s.count >= 1):
        raise r.err(f"mbarrier {s.name!r}: arrival count {s.count!r} must be >= 1")
    if not (isinstance(s.slots, int) and s.slots >= 1):
        raise r.err(f"mbarrier {s.name!r}: {s.slots!r} slots; must be >= 1")
    bar = mbarrier(r, s.name)
    opened = guarded(r, "one thread initialises the mbarrier" + ("s" if s.slots > 1 else ""))
    if s.slots == 1:
        r.emit_asm(["mbarrier.init.shared.b64 [%0], %1;"], [f'"r"({bar})', f'"r"({s.count})'])
    else:
        i = r.fresh("slot")
        r.emit(f"for (int {i} = 0; {i} < {s.slots}; ++{i}) {{")
        r.depth += 1
        r.emit_asm(["mbarrier.init.shared.b64 [%0], %1;"], [f'"r"({bar} + 8 * {i})', f'"r"({s.count})'])
        r.depth -= 1
        r.emit("}")
    r.emit("// make the initialised mbarrier visible to the async proxy (the TMA unit)")
    r.emit_asm(["fence.proxy.async.shared::cta;"], [])
    close_guard(r, opened)


def render_mbarrier_arrive(r, s: MbarrierArrive, scope) -> None:
    r.need_sm(90, "mbarrier.arrive")
    bar = mbarrier(r, s.name, s.slot, scope)
    if not s.expect_tx:
        r.emit_asm(["mbarrier.arrive.shared.b64 _, [%0];"], [f'"r"({bar})'])
        return
    if not (isinstance(s.expect_tx, int) and 0 < s.expect_tx < (1 << 20)):
        raise r.err(f"mbarrier {s.name!r}: expect_tx {s.expect_tx!r} bytes; must be in 1..2^20-1")
    r.emit(f"// {s.name} expects {s.expect_tx} bytes of copies this phase; they complete them")
    r.emit_asm(["mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;"],
               [f'"r"({bar})', f'"r"({s.expect_tx})'])


def render_mbarrier_wait(r, s: MbarrierWait, scope) -> None:
    r.need_sm(90, "mbarrier.try_wait")
    bar = mbarrier(r, s.name, s.slot, scope)
    if isinstance(s.phase, Const):
        parity = str(int(s.phase.value) & 1)
    else:
        parity = f"{r.operand(s.phase, scope, '&')} & 1"
    ready = r.fresh("ready")
    r.emit(f"{{  // wait until mbarrier {s.name} completes the phase of parity {parity}")
    r.depth += 1
    r.emit(f"unsigned {ready} = 0;")
    r.emit("do {")
    r.depth += 1
    r.emit_asm(["{", "    .reg .pred p;", "    mbarrier.try_wait.parity.shared.b64 p, [%1], %2;",
                "    selp.u32 %0, 1, 0, p;", "}"],
               [f'"r"({bar})', f'"r"({parity})'], [f'"=r"({ready})'])
    r.depth -= 1
    r.emit(f"}} while (!{ready});")
    r.depth -= 1
    r.emit("}")


# Kernel-IR statement -> the function that prints it (passes/lower/cuda.py's FEATURE_STATEMENTS)
STATEMENTS = {
    TmaLoad: render_tma_load, TmaTensorLoad: render_tma_tensor_load, MbarrierInit: render_mbarrier_init,
    MbarrierArrive: render_mbarrier_arrive, MbarrierWait: render_mbarrier_wait, ProxyFence: render_proxy_fence,
}
