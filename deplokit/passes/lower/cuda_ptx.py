"""Kernel IR -> CUDA C++, the instructions the renderer spells as inline PTX or a CUDA
intrinsic (see deplokit.passes.lower.cuda for the whole contract): `asm volatile` blocks,
shared-memory addresses, the one-thread election, and the statements that use them:
cp.async (sm_80+), TMA bulk and tensor-map copies and mbarriers (sm_90+), and float atomicAdd.
"""
from __future__ import annotations

from ...ir.kernel_ir import (AtomicAdd, Binary, Const, CpAsync, CpAsyncWait, If, MbarrierArrive, MbarrierInit,
                             MbarrierWait, SharedArray, Special, TmaLoad, TmaTensorLoad, walk_stmts)
from ...ir.types import ctype_bytes
from .cuda_expr import _PARAM_VALUE_TYPE, _PREC, INDENT, _Scope

# cuda.h's CUtensorMap (128 opaque bytes, 64-byte aligned), declared here so that the
# translation unit needs no driver header (NVRTC has none on its include path)
TENSOR_MAP_TYPE = "deplokit_tensor_map"
TENSOR_MAP_DECL = (f"// the layout of cuda.h's CUtensorMap: a tensor map the host encodes "
                   f"(cuTensorMapEncodeTiled), passed by value\n"
                   f"struct alignas(64) {TENSOR_MAP_TYPE} {{ unsigned long long opaque[16]; }};\n")


# the one-thread election of a TMA producer (sm_90): elect.sync in a converged warp 0; ptxas
# then issues the producer's copies once, with no loop over the warp's distinct operands
ELECT_DECL = ("// one lane of the calling (converged) warp: the issuer of a TMA producer's copies\n"
              "__device__ __forceinline__ bool deplokit_elect_one() {\n"
              "    unsigned elected;\n"
              '    asm volatile("{\\n .reg .pred e;\\n elect.sync _|e, 0xffffffff;\\n selp.u32 %0, 1, 0, e;\\n}\\n" : "=r"(elected));\n'
              "    return elected != 0;\n"
              "}\n")


def elects(k, sm: int) -> bool:
    """Kernel k's one-thread TMA issue is spelled with deplokit_elect_one (ELECT_DECL) on sm."""
    return sm >= 90 and any(isinstance(s, If) and s.elect for s in walk_stmts(k.body))


def _is_tid0(e) -> bool:
    return (isinstance(e, Binary) and e.op == "==" and e.a == Special("tid.x")
            and isinstance(e.b, Const) and int(e.b.value) == 0)


# statements one elected thread runs (the renderer guards them where every thread reaches them)
ONE_THREAD = (TmaLoad, TmaTensorLoad, MbarrierInit, MbarrierArrive)


class PtxRenderer:
    """The asynchronous-copy, mbarrier and atomic statements of `_Renderer`
    (deplokit.passes.lower.cuda_render), a mixin: it uses the renderer's `sm`, `depth`,
    `if_depth`, `flat_tid`, `mbarriers`, `dynamic_smem`, `k`, `emit`, `fresh`, `err` and the
    expression printer."""

    def emit_asm(self, template: list[str], inputs: list[str], outputs: list[str] = (), volatile=True) -> None:
        """`asm volatile(...)` with a "memory" clobber, wrapped one operand a line when long
        (volatile=False: a plain asm computing its outputs, no clobber)."""
        tmpl = [f'"{t}\\n"' for t in template]
        outs, ins = ", ".join(outputs), ", ".join(inputs)
        if not volatile:
            self.emit(f"asm({tmpl[0]} : {outs} : {ins});")
            return
        ops = f': {outs} : {ins} : "memory"' if outputs else (f':: {ins} : "memory"' if inputs else '::: "memory"')
        one = f"asm volatile({tmpl[0]} {ops});"
        if len(template) == 1 and len(INDENT * self.depth + one) <= 100:
            self.emit(one)
            return
        pad = " " * len("asm volatile(")
        self.emit(f"asm volatile({tmpl[0]}")
        for t in tmpl[1:]:
            self.emit(pad + t)
        if len(INDENT * self.depth + pad + ops + ");") <= 100:
            self.emit(pad + ops + ");")
            return
        lead = ": " if outputs else ":: "
        if outputs:
            self.emit(pad + ": " + outs)
        for i, op in enumerate(inputs):
            sep = "," if i < len(inputs) - 1 else ""
            self.emit(pad + (lead if i == 0 else " " * len(lead)) + op + sep)
        self.emit(pad + ': "memory");')

    def shared_addr(self, ref: str) -> str:
        return f"static_cast<unsigned>(__cvta_generic_to_shared(&{ref}))"

    def pinned_addr(self, var: str, ref: str, why: str) -> None:
        """`unsigned var`: the shared address of `ref`, computed once and kept in a register:
        passed through an (empty) asm so that nvcc cannot recompute it (S2R SR_CgaCtaId and
        a LEA) at each use in the K loop."""
        self.emit(f"unsigned {var};  // {why}")
        self.emit_asm(["mov.u32 %0, %1;"], [f'"r"({self.shared_addr(ref)})'], [f'"=r"({var})'], volatile=False)

    def elected_cond(self, s: If, scope) -> str:
        """The condition of an If that picks the one issuing thread (If.elect): warp 0 elects
        one lane on sm_90 (the copies' operands are the same for every thread)."""
        if self.sm < 90 or not _is_tid0(s.cond):
            return self.expr(s.cond, scope)
        return f"{self.flat_tid} < 32 && deplokit_elect_one()"

    def tma_destinations(self) -> set:
        if not hasattr(self, "_tma_arrays"):
            arrays = dict.fromkeys(n.array for n in walk_stmts(self.k.body) if isinstance(n, TmaTensorLoad))
            self._tma_arrays = {a: self.fresh(f"{a}_addr") for a in arrays}
        return self._tma_arrays

    def declare_tma_destination(self, s: SharedArray) -> None:
        """After a shared array that tensor-map copies fill: its shared address, kept."""
        var = self.tma_destinations().get(s.name)
        if var:
            self.pinned_addr(var, f"{s.name}[0]", "the shared address tensor-map copies fill from")

    def guarded(self, why: str) -> bool:
        """Open `if (thread 0)` around a one-thread statement that every thread reaches."""
        if self.if_depth:
            return False
        self.emit(f"if ({self.flat_tid} == 0) {{  // {why}")
        self.depth += 1
        return True

    def close_guard(self, opened: bool) -> None:
        if opened:
            self.depth -= 1
            self.emit("}")

    def need_sm(self, sm: int, what: str) -> None:
        if self.sm < sm:
            raise self.err(f"{what} needs sm_{sm} or newer; target is sm_{self.sm}")

    def cp_async(self, s: CpAsync, scope: _Scope) -> None:
        self.need_sm(80, "cp.async")
        if s.nbytes not in (4, 8, 16):
            raise self.err(f"cp.async of {s.nbytes} bytes; supported: 4, 8, 16")
        p = self.param(s.buffer)
        if _PARAM_VALUE_TYPE[p.ctype] != "float":
            raise self.err(f"cp.async from {s.buffer!r}, a buffer of {p.ctype}")
        kind = "cg" if s.nbytes == 16 else "ca"       # cg: through L2 only, 16 bytes
        dst = self.shared_addr(f"{s.array}[{self.expr(s.dst_offset, scope)}]")
        src = f"&{s.buffer}[{self.expr(s.src_offset, scope)}]"
        self.emit_asm([f"cp.async.{kind}.shared.global [%0], [%1], {s.nbytes};"],
                      [f'"r"({dst})', f'"l"({src})'])

    def cp_async_commit(self) -> None:
        self.need_sm(80, "cp.async.commit_group")
        self.emit_asm(["cp.async.commit_group;"], [])

    def cp_async_wait(self, s: CpAsyncWait) -> None:
        self.need_sm(80, "cp.async.wait_group")
        if not (isinstance(s.pending, int) and 0 <= s.pending <= 7):
            raise self.err(f"cp.async.wait_group {s.pending!r}: pending groups must be 0..7")
        self.emit_asm([f"cp.async.wait_group {s.pending};"], [])

    def atomic_add(self, s: AtomicAdd, scope: _Scope) -> None:
        p = self.param(s.buffer, write=True)
        if _PARAM_VALUE_TYPE[p.ctype] != "float":
            raise self.err(f"atomicAdd into {s.buffer!r}, a buffer of {p.ctype}")
        self.emit(f"atomicAdd(&{s.buffer}[{self.expr(s.offset, scope)}], {self.expr(s.value, scope)});")

    def declare_mbarriers(self, scope: _Scope) -> None:
        """The preamble's mbarriers (an array of them for a ring's slots), before any float
        array, each with a variable holding its shared address."""
        inits: dict[str, int] = {}
        for n in walk_stmts(self.k.body):
            if isinstance(n, MbarrierInit) and n.name not in self.mbarriers:
                self.need_sm(90, "mbarrier (Kernel IR completes mbarriers with TMA)")
                self.mbarriers[n.name] = self.fresh(f"{n.name}_addr")
                inits[n.name] = n.slots
        self.smem_bytes = 8 * sum(inits.values())
        for name, slots in inits.items():
            if slots == 1:
                self.emit(f"__shared__ __align__(8) unsigned long long {name};  // mbarrier")
                self.pinned_addr(self.mbarriers[name], name, "its shared address")
            else:
                self.emit(f"__shared__ __align__(8) unsigned long long {name}[{slots}];  // one mbarrier per slot")
                self.pinned_addr(self.mbarriers[name], name + "[0]", "their shared address")
            scope.declare(name, "mbarrier")

    def dynamic_array(self, s: SharedArray) -> None:
        """A shared array carved from the kernel's dynamic shared memory at its fixed offset."""
        nbytes, ctype = ctype_bytes(s.ctype) * s.size, self.c_type(s.ctype)
        if s.offset < 0 or s.offset % s.align or s.offset + nbytes > self.k.dynamic_smem:
            raise self.err(f"shared array {s.name!r} at dynamic offset {s.offset} ({nbytes} bytes, "
                           f"alignment {s.align}) is outside the kernel's {self.k.dynamic_smem} bytes of "
                           f"dynamic shared memory or misaligned")
        self.emit(f"{ctype}* const {s.name} = reinterpret_cast<{ctype}*>({self.dynamic_smem} + {s.offset});"
                  f"  // {nbytes} bytes")

    def mbarrier(self, name: str, slot=None, scope=None) -> str:
        """The shared address of mbarrier `name` (of name[slot] in an array of them)."""
        if name not in self.mbarriers:
            raise self.err(f"mbarrier {name!r} is used but no MbarrierInit declares it")
        addr = self.mbarriers[name]
        if slot is None or (isinstance(slot, Const) and int(slot.value) == 0):
            return addr
        if isinstance(slot, Const):
            return f"{addr} + {8 * int(slot.value)}"
        return f"{addr} + 8 * ({self.expr(slot, scope)})"

    def tma_load(self, s: TmaLoad, scope: _Scope) -> None:
        self.need_sm(90, "TMA (cp.async.bulk)")
        nbytes = 4 * s.count
        if s.count <= 0 or nbytes % 16:
            raise self.err(f"TMA bulk copy of {s.count} floats ({nbytes} bytes): the size must be a "
                           f"positive multiple of 16 bytes")
        p = self.param(s.buffer)
        if _PARAM_VALUE_TYPE[p.ctype] != "float":
            raise self.err(f"TMA copy from {s.buffer!r}, a buffer of {p.ctype}")
        bar = self.mbarrier(s.barrier, s.slot, scope)
        dst = self.shared_addr(f"{s.array}[{self.expr(s.dst_offset, scope)}]")
        src = f"&{s.buffer}[{self.expr(s.src_offset, scope)}]"
        opened = self.guarded("one thread issues the bulk copy")
        if s.expect:
            self.emit(f"// {s.barrier} expects {nbytes} more bytes this phase; the copy completes them")
            self.emit_asm(["mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;"],
                          [f'"r"({bar})', f'"r"({nbytes})'])
        self.emit_asm(["cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"],
                      [f'"r"({dst})', f'"l"({src})', f'"r"({nbytes})', f'"r"({bar})'])
        self.close_guard(opened)

    def tensor_map_params(self, scope: _Scope) -> list[str]:
        """The kernel's tensor maps as parameters, after its buffers, passed by value."""
        for t in self.k.tensor_maps:
            scope.declare(t.name, "param")
        return [f"const __grid_constant__ {TENSOR_MAP_TYPE} {t.name}" for t in self.k.tensor_maps]

    def tma_tensor_load(self, s: TmaTensorLoad, scope: _Scope) -> None:
        self.need_sm(90, "TMA (cp.async.bulk.tensor)")
        try:
            tmap = self.k.tensor_map(s.tensor_map)
        except KeyError:
            raise self.err(f"TMA copy through tensor map {s.tensor_map!r}, which is no tensor-map parameter "
                           f"of the kernel") from None
        rank = len(tmap.box)
        if not 1 <= rank <= 5 or len(s.coords) != rank:
            raise self.err(f"TMA copy through {s.tensor_map} with {len(s.coords)} coordinates; the map has "
                           f"rank {rank} (1 to 5)")
        bar = self.mbarrier(s.barrier, s.slot, scope)
        base = self.tma_destinations()[s.array]
        nbytes = ctype_bytes((scope.lookup(s.array) or "shared:float").split(":")[-1])
        if isinstance(s.dst_offset, Const):
            dst = f"{base} + {nbytes * int(s.dst_offset.value)}" if int(s.dst_offset.value) else base
        else:
            dst = f"{base} + {nbytes} * ({self.expr(s.dst_offset, scope)})"
        coords = [self.expr(c, scope) for c in reversed(s.coords)]      # PTX: innermost first
        opened = self.guarded("one thread issues the tensor-map copy")
        if s.expect:
            self.emit(f"// {s.barrier} expects the box's {tmap.box_bytes} bytes this phase; the copy completes them")
            self.emit_asm(["mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;"],
                          [f'"r"({bar})', f'"r"({tmap.box_bytes})'])
        at = ", ".join(f"%{3 + i}" for i in range(rank))
        self.emit_asm([f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes"
                       f" [%0], [%1, {{{at}}}], [%2];"],
                      [f'"r"({dst})', f'"l"(reinterpret_cast<unsigned long long>(&{tmap.name}))', f'"r"({bar})']
                      + [f'"r"({c})' for c in coords])
        self.close_guard(opened)

    def proxy_fence(self) -> None:
        self.need_sm(90, "fence.proxy.async")
        self.emit_asm(["fence.proxy.async.shared::cta;"], [])

    def mbarrier_init(self, s: MbarrierInit) -> None:
        self.need_sm(90, "mbarrier (Kernel IR completes mbarriers with TMA)")
        if not (isinstance(s.count, int) and s.count >= 1):
            raise self.err(f"mbarrier {s.name!r}: arrival count {s.count!r} must be >= 1")
        if not (isinstance(s.slots, int) and s.slots >= 1):
            raise self.err(f"mbarrier {s.name!r}: {s.slots!r} slots; must be >= 1")
        bar = self.mbarrier(s.name)
        opened = self.guarded("one thread initialises the mbarrier" + ("s" if s.slots > 1 else ""))
        if s.slots == 1:
            self.emit_asm(["mbarrier.init.shared.b64 [%0], %1;"], [f'"r"({bar})', f'"r"({s.count})'])
        else:
            i = self.fresh("slot")
            self.emit(f"for (int {i} = 0; {i} < {s.slots}; ++{i}) {{")
            self.depth += 1
            self.emit_asm(["mbarrier.init.shared.b64 [%0], %1;"], [f'"r"({bar} + 8 * {i})', f'"r"({s.count})'])
            self.depth -= 1
            self.emit("}")
        self.emit("// make the initialised mbarrier visible to the async proxy (the TMA unit)")
        self.emit_asm(["fence.proxy.async.shared::cta;"], [])
        self.close_guard(opened)

    def mbarrier_arrive(self, s: MbarrierArrive, scope: _Scope) -> None:
        self.need_sm(90, "mbarrier.arrive")
        bar = self.mbarrier(s.name, s.slot, scope)
        if not s.expect_tx:
            self.emit_asm(["mbarrier.arrive.shared.b64 _, [%0];"], [f'"r"({bar})'])
            return
        if not (isinstance(s.expect_tx, int) and 0 < s.expect_tx < (1 << 20)):
            raise self.err(f"mbarrier {s.name!r}: expect_tx {s.expect_tx!r} bytes; must be in 1..2^20-1")
        self.emit(f"// {s.name} expects {s.expect_tx} bytes of copies this phase; they complete them")
        self.emit_asm(["mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;"],
                      [f'"r"({bar})', f'"r"({s.expect_tx})'])

    def mbarrier_wait(self, s: MbarrierWait, scope: _Scope) -> None:
        self.need_sm(90, "mbarrier.try_wait")
        bar = self.mbarrier(s.name, s.slot, scope)
        if isinstance(s.phase, Const):
            parity = str(int(s.phase.value) & 1)
        else:
            parity = f"{self._sub(s.phase, scope, _PREC['&'], '&', False)} & 1"
        ready = self.fresh("ready")
        self.emit(f"{{  // wait until mbarrier {s.name} completes the phase of parity {parity}")
        self.depth += 1
        self.emit(f"unsigned {ready} = 0;")
        self.emit("do {")
        self.depth += 1
        self.emit_asm(["{", "    .reg .pred p;", "    mbarrier.try_wait.parity.shared.b64 p, [%1], %2;",
                       "    selp.u32 %0, 1, 0, p;", "}"],
                      [f'"r"({bar})', f'"r"({parity})'], [f'"=r"({ready})'])
        self.depth -= 1
        self.emit(f"}} while (!{ready});")
        self.depth -= 1
        self.emit("}")
