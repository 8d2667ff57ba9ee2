"""The machine code view: each kernel's SASS and the instruction mix of its hottest loop.

    report = analyze_sass(text, "sm_90", stats=ptxas_stats)   # text: cuobjdump -sass output
    report.kernel("merged_matmul").hottest.mix.ffma_share       # 0.45

`Compilation.sass()` builds the report (nvcc -> cubin -> cuobjdump); this module only reads
text, so it is tested on a stored sample without the tools.

The hottest loop is where a kernel spends its issue slots. Trip counts are not in the
machine code, so it is chosen by nesting: among the loops that do floating-point work, the
most deeply nested (counting only such loops, so an mbarrier poll or an ELECT loop around a
bulk copy inside the K loop does not win), then the one with the most FFMA. Counts are
static: each instruction of the loop's body once, as one iteration issues it when every
nested poll succeeds at once.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..display import Displayable
from .sass_parse import Instruction, basic_blocks, natural_loops, parse_sass

FLOAT_OPS = {"FFMA", "FADD", "FMUL", "FMNMX", "MUFU", "FSETP", "FSEL", "FCHK", "FRND", "HFMA2", "HADD2", "HMUL2",
             "DFMA", "DADD", "DMUL", "FSWZADD", "FFMA2", "FADD2", "FMUL2"}
GLOBAL_LOADS = {"LDG", "LD"}
GLOBAL_STORES = {"STG", "ST"}
ATOMICS = {"RED", "ATOM", "ATOMG", "REDG"}
BULK = {"UBLKCP"}                         # cp.async.bulk (1-D bulk copies)
TMA = {"UTMALDG", "UTMASTG"}              # cp.async.bulk.tensor (TMA descriptors)


def shared_width(opcode: str) -> int:
    """Bits one lane moves with an LDS/STS: LDS.U.128 -> 128, LDS -> 32."""
    for part in opcode.split(".")[1:]:
        if part in ("64", "128"):
            return int(part)
    return 32


class SharedLoadCounts:
    """Shared loads of all widths, and per FFMA, of a mix with lds, lds64, lds128 and ffma
    counts: the machine code's here, the cost model's prediction (tune/sass_model/main_loop.py)."""
    __slots__ = ()

    @property
    def shared_loads(self) -> int:
        return self.lds + self.lds64 + self.lds128

    @property
    def shared_loads_per_ffma(self) -> float:
        return self.shared_loads / self.ffma if self.ffma else 0.0


@dataclass(frozen=True)
class InstructionMix(SharedLoadCounts):
    instructions: int           # issued instructions (no NOP, no @!PT placeholder)
    ffma: int
    float_ops: int              # every FP32/SFU arithmetic instruction, FFMA included
    lds: int                    # shared loads by width: 32-bit
    lds64: int
    lds128: int
    sts: int                    # shared stores
    ldg: int                    # global loads
    stg: int                    # global stores
    atomics: int
    bulk: int                   # UBLKCP
    tma: int                    # UTMALDG / UTMASTG
    ldgsts: int                 # cp.async
    bar: int                    # block barriers
    mbarrier_waits: int         # SYNCS.PHASECHK
    local: int                  # LDL / STL: spilled registers
    hmma: int = 0               # tensor-core mma.sync (HMMA, any shape and type)
    ldsm: int = 0               # ldmatrix (LDSM)
    hgmma: int = 0              # Hopper warpgroup mma (HGMMA)

    @property
    def math(self) -> int:
        """Floating-point work instructions: FP32/SFU arithmetic and tensor-core mma."""
        return self.float_ops + self.hmma + self.hgmma

    @property
    def ffma_share(self) -> float:
        return self.ffma / self.instructions if self.instructions else 0.0

    @property
    def copies(self) -> int:
        """Copy instructions into shared memory: bulk, TMA and cp.async."""
        return self.bulk + self.tma + self.ldgsts

    def lines(self) -> list[str]:
        per = f"{self.shared_loads_per_ffma:.2f} per FFMA" if self.ffma else "no FFMA"
        return [f"{self.instructions} instructions, {self.ffma} FFMA (share {self.ffma_share:.2f}), "
                f"{self.float_ops} floating-point in all",
                f"shared loads {self.shared_loads} = {per}: LDS {self.lds}, LDS.64 {self.lds64}, "
                f"LDS.128 {self.lds128}; shared stores {self.sts}",
                f"global loads {self.ldg}, stores {self.stg}, atomics {self.atomics}; bulk copies {self.bulk} "
                f"(UBLKCP), TMA {self.tma} (UTMALDG), LDGSTS {self.ldgsts}",
                f"barriers {self.bar} (BAR), mbarrier waits {self.mbarrier_waits}, local loads/stores {self.local}"] + \
            ([f"tensor cores: HMMA {self.hmma}, HGMMA {self.hgmma}, LDSM {self.ldsm}"]
             if self.hmma or self.hgmma or self.ldsm else [])


def instruction_mix(instrs) -> InstructionMix:
    counts = dict.fromkeys(("instructions", "ffma", "float_ops", "lds", "lds64", "lds128", "sts", "ldg", "stg",
                            "atomics", "bulk", "tma", "ldgsts", "bar", "mbarrier_waits", "local", "hmma", "ldsm",
                            "hgmma"), 0)
    for ins in instrs:
        if not ins.counted:
            continue
        b = ins.base
        counts["instructions"] += 1
        counts["ffma"] += b == "FFMA"
        counts["float_ops"] += b in FLOAT_OPS
        if b == "LDS":
            counts[{32: "lds", 64: "lds64", 128: "lds128"}[shared_width(ins.opcode)]] += 1
        counts["sts"] += b == "STS"
        counts["ldg"] += b in GLOBAL_LOADS
        counts["stg"] += b in GLOBAL_STORES
        counts["atomics"] += b in ATOMICS
        counts["bulk"] += b in BULK
        counts["tma"] += b in TMA
        counts["ldgsts"] += b == "LDGSTS"
        counts["bar"] += b == "BAR"
        counts["mbarrier_waits"] += ins.opcode.startswith("SYNCS.PHASECHK")
        counts["local"] += b in ("LDL", "STL")
        counts["hmma"] += b == "HMMA"
        counts["ldsm"] += b == "LDSM"
        counts["hgmma"] += b == "HGMMA"
    return InstructionMix(**counts)


@dataclass(frozen=True)
class SassLoop:
    index: int                  # L1, L2, ... in the order of their headers
    header: int                 # address of the first instruction of the loop's header block
    addresses: tuple[int, ...]  # every instruction of the body, in address order
    depth: int                  # 1 for an outermost loop
    parent: int | None          # index of the innermost loop around it
    mix: InstructionMix

    @property
    def start(self) -> int:
        return self.addresses[0]

    @property
    def end(self) -> int:
        return self.addresses[-1]

    @property
    def name(self) -> str:
        return f"L{self.index}"


@dataclass(frozen=True)
class KernelSass:
    name: str
    instructions: tuple[Instruction, ...]
    loops: tuple[SassLoop, ...]
    hottest_index: int | None   # the loop the summary describes, None without loops
    registers: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    smem_bytes: int | None = None

    @property
    def hottest(self) -> SassLoop | None:
        return None if self.hottest_index is None else self.loops[self.hottest_index - 1]

    @property
    def spills(self) -> int | None:
        return None if self.spill_stores is None else self.spill_stores + (self.spill_loads or 0)

    @property
    def mix(self) -> InstructionMix:
        """The whole kernel's mix (every instruction once)."""
        return instruction_mix(self.instructions)

    def enclosing(self, loop: SassLoop) -> list[SassLoop]:
        """`loop` and the loops around it, innermost first."""
        out = [loop]
        while out[-1].parent is not None:
            out.append(self.loops[out[-1].parent - 1])
        return out

    def main_loop(self) -> SassLoop | None:
        """The outermost floating-point loop around the hottest one: for a matmul, the K loop
        with its copies and barriers, whether or not nvcc unrolled the k steps inside it."""
        hot = self.hottest
        if hot is None:
            return None
        fp = [lp for lp in self.enclosing(hot) if lp.mix.math]
        return fp[-1]

    def innermost(self) -> dict[int, SassLoop]:
        """address -> the innermost loop holding it."""
        out: dict[int, SassLoop] = {}
        for lp in sorted(self.loops, key=lambda lp: lp.depth):
            for a in lp.addresses:
                out[a] = lp
        return out

    def header_line(self) -> str:
        res = []
        if self.registers is not None:
            res.append(f"{self.registers} registers")
        if self.spills is not None:
            res.append(f"{self.spills} bytes spilled (stores {self.spill_stores}, loads {self.spill_loads})")
        if self.smem_bytes is not None:
            res.append(f"{self.smem_bytes} bytes static shared")
        res.append(f"{self.mix.instructions} instructions, {len(self.loops)} loops")
        return f"// kernel {self.name}: " + ", ".join(res)

    def summary_lines(self) -> list[str]:
        hot = self.hottest
        if hot is None:
            return [self.header_line(), "// no loop: straight-line code"]
        where = f"0x{hot.start:04x}..0x{hot.end:04x}, depth {hot.depth}"
        return [self.header_line(), f"// hottest loop {hot.name} ({where}):"] + [f"//   {x}" for x in hot.mix.lines()]

    def listing(self) -> list[str]:
        """Every instruction; a gutter names the innermost loop holding it, `*` the hottest."""
        inner = self.innermost()
        hot = set(self.hottest.addresses) if self.hottest else set()
        width = max((len(lp.name) for lp in self.loops), default=0)
        out = []
        for ins in self.instructions:
            lp = inner.get(ins.address)
            gutter = (lp.name if lp else "").ljust(width)
            out.append(f"{gutter} {'*' if ins.address in hot else ' '} {ins}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.summary_lines() + self.listing())


def _rank(loop: SassLoop, loops) -> tuple:
    fp_depth = sum(1 for other in loops if other.mix.math and set(loop.addresses) <= set(other.addresses))
    return (loop.mix.math > 0, fp_depth, loop.mix.ffma + loop.mix.hmma + loop.mix.hgmma, loop.mix.instructions,
            -loop.header)


def analyze_kernel(name: str, instrs, stats=None) -> KernelSass:
    """Loops, their mixes and the hottest of one kernel; `stats`: ptxas's KernelStats or None."""
    blocks, succ = basic_blocks(instrs)
    found = natural_loops(succ, len(blocks))
    bodies = []
    for header, members in found:
        addrs = tuple(sorted(instrs[i].address for b in members for i in range(blocks[b][0], blocks[b][1] + 1)))
        bodies.append((instrs[blocks[header][0]].address, addrs))
    bodies.sort()
    sets = [set(a) for _, a in bodies]
    loops: list[SassLoop] = []
    by_address = {ins.address: ins for ins in instrs}
    for i, (header, addrs) in enumerate(bodies):
        around = [j for j in range(len(bodies)) if j != i and sets[i] < sets[j]]
        parent = min(around, key=lambda j: len(sets[j])) + 1 if around else None
        loops.append(SassLoop(i + 1, header, addrs, len(around) + 1, parent,
                              instruction_mix(by_address[a] for a in addrs)))
    hottest = max(loops, key=lambda lp: _rank(lp, loops)).index if loops else None
    s = stats
    return KernelSass(name, tuple(instrs), tuple(loops), hottest,
                      getattr(s, "registers", None), getattr(s, "spill_stores", None),
                      getattr(s, "spill_loads", None), getattr(s, "smem_bytes", None))


@dataclass(frozen=True)
class SassReport(Displayable):
    arch: str
    tool: str                           # e.g. "cuobjdump 13.2.51"
    kernels: tuple[KernelSass, ...]

    def kernel(self, name: str) -> KernelSass:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel {name!r} in the SASS; kernels: {', '.join(k.name for k in self.kernels)}")

    def summary(self) -> str:
        """Each kernel's header and hottest-loop summary, without the listing."""
        return "\n".join(line for k in self.kernels for line in k.summary_lines()) + "\n"

    def __str__(self) -> str:
        head = f"// SASS for {self.arch} ({self.tool}), {len(self.kernels)} kernels"
        return "\n\n".join([head] + [str(k) for k in self.kernels]) + "\n"


def analyze_sass(text: str, arch: str, tool: str = "", stats: dict | None = None, order=None) -> SassReport:
    """The report of every kernel in `text`; `order`: kernel names to list first, in that order."""
    parsed = parse_sass(text)
    names = [n for n in (order or ()) if n in parsed] + [n for n in parsed if n not in (order or ())]
    return SassReport(arch, tool, tuple(analyze_kernel(n, parsed[n], (stats or {}).get(n)) for n in names))


__all__ = [
    "SharedLoadCounts",
    "InstructionMix",
    "SassLoop",
    "KernelSass",
    "SassReport",
    "analyze_sass",
    "analyze_kernel",
    "instruction_mix",
    "shared_width",
]
