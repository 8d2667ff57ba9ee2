"""The Kernel-IR statements of TMA copies and mbarrier rings (an advanced feature, sm_90:
passes/lower/k002_stage_copies.py emits them for the stages 011 tma_copy made TMA copies,
passes/tma/cuda_tma.py prints them as CUDA, runtime/sim/tma.py runs them): the bulk and
tensor-map copies, the mbarriers they complete on, the proxy fence, and the tensor maps a
kernel takes as parameters (KernelFunc.tensor_maps). Each statement prints itself (`text`)
and names its locals (`LOCAL_FIELDS`) and the expressions beyond kernel_ir's usual fields
(`MORE_EXPRS`), which kernel_ir asks of a statement it does not know; an MbarrierInit also
says the shared bytes its mbarriers take before the kernel's arrays (`preamble_smem_bytes`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .kernel_ir import Expr, format_copy, format_expr, format_plain


def format_mbarrier(name: str, slot) -> str:
    """An mbarrier as it prints: its name, or name[slot] for one slot of a ring's array."""
    return name if slot is None else f"{name}[{format_plain(slot)}]"


@dataclass(frozen=True)
class TmaLoad:
    """Bulk copy of a contiguous run of `count` floats from global to shared, completing on
    mbarrier `barrier` (sm_90 cp.async.bulk): its bytes count down the barrier's expected
    transaction count (complete_tx). Issued by one thread. `slot`: which mbarrier of the
    array `barrier` names (a stage ring's full barrier; None: a single mbarrier). `expect`:
    the issuing thread also arrives on the barrier announcing the copy's bytes
    (arrive.expect_tx); False when an MbarrierArrive with expect_tx announced the bytes of
    the whole group (passes/lower/stage_plan.py SlotBarrier)."""
    array: str
    dst_offset: Expr
    buffer: str
    src_offset: Expr
    count: int
    barrier: str
    slot: Expr | None = None
    expect: bool = True
    LOCAL_FIELDS = ("array", "barrier")
    MORE_EXPRS = ("dst_offset", "src_offset", "slot")

    def text(self) -> str:
        return f"tma {self.count} floats {format_copy(self)} on {format_mbarrier(self.barrier, self.slot)}"


@dataclass(frozen=True)
class MbarrierInit:
    """`slots` mbarriers called name[0..slots) (one when slots is 1), each completing a phase
    when `count` arrivals have been made and every announced transaction byte has landed."""
    name: str
    count: int = 1
    slots: int = 1
    LOCAL_FIELDS = ("name",)

    @property
    def preamble_smem_bytes(self) -> int:
        """8 bytes per mbarrier, declared at the top of the kernel before its shared arrays."""
        return 8 * self.slots

    def text(self) -> str:
        slots = f"[{self.slots}]" if self.slots != 1 else ""
        return f"mbarrier.init {self.name}{slots} count {self.count}"


@dataclass(frozen=True)
class MbarrierArrive:
    """Every thread that runs it arrives once on mbarrier name[slot]. expect_tx > 0: the
    arrival also announces that many bytes of copies completing on this phase
    (mbarrier.arrive.expect_tx; one thread makes it)."""
    name: str
    slot: Expr | None = None
    expect_tx: int = 0
    LOCAL_FIELDS = ("name",)
    MORE_EXPRS = ("slot",)

    def text(self) -> str:
        tx = f" expect_tx {self.expect_tx} bytes" if self.expect_tx else ""
        return f"mbarrier.arrive {format_mbarrier(self.name, self.slot)}{tx}"


@dataclass(frozen=True)
class ProxyFence:
    """fence.proxy.async.shared::cta: the shared-memory stores the thread made as ordinary
    stores (the generic proxy) are ordered before its later operations of the async proxy
    (TMA copies) on the same shared memory; each thread that stored fences before the
    barrier that hands the memory to the copy's issuer."""

    def text(self) -> str:
        return "fence.proxy.async"


@dataclass(frozen=True)
class MbarrierWait:
    """Wait until the phase of mbarrier name[slot] whose parity is `phase & 1` has completed
    (mbarrier.try_wait.parity: it returns once the barrier's current phase has the other
    parity; a barrier that never completed a phase counts parity 1 as completed)."""
    name: str
    phase: Expr
    slot: Expr | None = None
    LOCAL_FIELDS = ("name",)
    MORE_EXPRS = ("phase", "slot")

    def text(self) -> str:
        return f"mbarrier.wait {format_mbarrier(self.name, self.slot)} phase {format_expr(self.phase)}"


@dataclass(frozen=True)
class TmaTensorLoad:
    """cp.async.bulk.tensor (sm_90): the box of tensor map `tensor_map` (a TensorMap of the
    kernel) whose first element is at `coords` (element coordinates, outermost dimension
    first; elements outside the tensor read 0) into shared `array` at element `dst_offset`,
    written swizzled as the map says, completing the box's bytes on mbarrier `barrier`.
    Issued by one thread."""
    array: str
    dst_offset: Expr
    tensor_map: str
    coords: tuple[Expr, ...]
    barrier: str
    slot: Expr | None = None       # which mbarrier of the array `barrier` (a ring's full[slot])
    expect: bool = True            # the copy announces its own bytes (False: the ring's arrival does)
    LOCAL_FIELDS = ("array", "barrier")
    MORE_EXPRS = ("dst_offset", "slot", "coords")

    def text(self) -> str:
        at = ", ".join(format_plain(c) for c in self.coords)
        return (f"tma box shared {self.array}[{format_plain(self.dst_offset)}] <- "
                f"{self.tensor_map}[{at}] on {format_mbarrier(self.barrier, self.slot)}")


@dataclass(frozen=True)
class TensorMap:
    """A `const __grid_constant__ CUtensorMap` parameter of a kernel (after its buffers): how
    TmaTensorLoads copy boxes of global buffer `buffer` (row-major `shape`, float32 or half) into
    shared memory. The host encodes it for the device buffer (runtime/tensor_map.py)."""
    name: str
    buffer: str
    shape: tuple[int, ...]        # the buffer's dims, outermost first
    box: tuple[int, ...]          # one copy's extent per dim, outermost first
    swizzle: int = 0              # bytes (0, 32, 64, 128): deplokit.ir.swizzle
    element_bytes: int = 4        # 2: a bf16/fp16 buffer's box, copied raw (008's wgmma operands)

    @property
    def box_bytes(self) -> int:
        n = self.element_bytes
        for b in self.box:
            n *= b
        return n

    def text(self) -> str:
        """What the kernel's header says of this parameter."""
        swz = f", swizzle {self.swizzle}B" if self.swizzle else ""
        return f"tensor map of {self.buffer}{list(self.shape)}, box {list(self.box)}{swz}"


TmaStmt = Union[TmaLoad, TmaTensorLoad, MbarrierInit, MbarrierArrive, MbarrierWait, ProxyFence]
