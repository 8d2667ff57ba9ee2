"""SASS text (cuobjdump -sass or nvdisasm -c) -> instructions per kernel, and their loops.

Both tools print one instruction a line, `/*0a30*/  @P0 BRA 0x1b0 ;` (cuobjdump: branch
targets are addresses, a kernel starts at `Function : NAME`) or `@P0 BRA `(.L_x_4) ;`
(nvdisasm: targets are labels `.L_x_4:`, a kernel starts at `.text.NAME:`).

Loops are natural loops of the control-flow graph: an edge whose target dominates its source
is a back edge, and the loop is the target plus every block that reaches the source without
passing it. A backward jump that is not a back edge (nvcc moves an mbarrier's retry path to
the kernel's end and jumps back into the loop) makes no loop; the retry path's own self-loop
is a loop nested in the one it came from.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_INSTR = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+(.*?)\s*;")
_CUOBJDUMP_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_NVDISASM_FUNC = re.compile(r"^\.text\.(\S+):\s*$")
_LABEL = re.compile(r"^\s*(\.L\w+):\s*$")
_HEX_TARGET = re.compile(r"(?:^|[\s,])(0x[0-9a-fA-F]+)\s*$")
_LABEL_TARGET = re.compile(r"`\((\.L\w+)\)")

JUMPS = {"BRA", "JMP"}
INDIRECT = {"BRX", "JMX"}
ENDS = {"EXIT", "RET", "KILL", "BPT"}


@dataclass(frozen=True)
class Instruction:
    address: int
    predicate: str          # "", "P0", "!P0", "UP1", "!PT" (never runs)
    opcode: str             # e.g. LDS.U.128
    operands: str
    target: int | None = None   # a jump's destination address

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]

    @property
    def never(self) -> bool:
        return self.predicate == "!PT"

    @property
    def counted(self) -> bool:
        """Issued work: not padding (NOP) and not a never-executed placeholder."""
        return not self.never and self.base != "NOP"

    def __str__(self) -> str:
        pred = f"@{self.predicate} " if self.predicate else ""
        return f"/*{self.address:04x}*/ {pred}{self.opcode}{' ' + self.operands if self.operands else ''} ;"


def _instruction(address: int, body: str) -> tuple[Instruction, str | None]:
    body = body.strip().lstrip("{").strip()
    pred = ""
    if body.startswith("@"):
        pred, _, body = body[1:].partition(" ")
    opcode, _, operands = body.strip().partition(" ")
    operands = operands.strip()
    target, label = None, None
    if opcode.split(".")[0] in JUMPS:
        m = _LABEL_TARGET.search(operands)
        if m:
            label = m.group(1)
        else:
            m = _HEX_TARGET.search(operands)
            target = int(m.group(1), 16) if m else None
    return Instruction(address, pred, opcode, operands, target), label


def parse_sass(text: str) -> dict[str, tuple[Instruction, ...]]:
    """Kernel name -> its instructions in address order, in the order the text lists them."""
    raw: dict[str, list] = {}
    labels: dict[str, dict[str, int]] = {}
    current = None
    pending: list[str] = []
    for line in text.splitlines():
        m = _CUOBJDUMP_FUNC.match(line) or _NVDISASM_FUNC.match(line)
        if m:
            current = m.group(1)
            raw[current], labels[current], pending = [], {}, []
            continue
        if current is None:
            continue
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = _INSTR.match(line)
        if m:
            address = int(m.group(1), 16)
            for name in pending:
                labels[current][name] = address
            pending = []
            raw[current].append(_instruction(address, m.group(2)))
    out = {}
    for name, items in raw.items():
        resolved = []
        for ins, label in items:
            if label is not None and label in labels[name]:
                ins = Instruction(ins.address, ins.predicate, ins.opcode, ins.operands, labels[name][label])
            resolved.append(ins)
        while resolved and resolved[-1].base == "NOP":      # the padding after the last branch
            resolved.pop()
        out[name] = tuple(resolved)
    return out


# -- control flow -------------------------------------------------------------------------------

def _conditional(ins: Instruction) -> bool:
    return bool(ins.predicate) and ins.predicate != "PT" or ins.opcode.startswith("BRA.DIV")


def basic_blocks(instrs) -> tuple[list[tuple[int, int]], dict[int, list[int]]]:
    """([(first, last) instruction index of each block], block -> successor blocks)."""
    at = {ins.address: i for i, ins in enumerate(instrs)}
    leaders = {0} if instrs else set()
    for i, ins in enumerate(instrs):
        if ins.never:
            continue
        if ins.base in JUMPS or ins.base in INDIRECT or ins.base in ENDS:
            leaders.add(i + 1)
            if ins.target in at:
                leaders.add(at[ins.target])
    starts = sorted(x for x in leaders if x < len(instrs))
    blocks = [(s, (starts[j + 1] if j + 1 < len(starts) else len(instrs)) - 1) for j, s in enumerate(starts)]
    block_of = {s: b for b, (s, _) in enumerate(blocks)}
    succ: dict[int, list[int]] = {}
    for b, (_, last) in enumerate(blocks):
        ins = instrs[last]
        out = []
        falls = ins.base not in JUMPS | INDIRECT | ENDS or ins.never or _conditional(ins)
        if ins.base in JUMPS and not ins.never and ins.target in at:
            out.append(block_of[at[ins.target]])
        if falls and b + 1 < len(blocks):
            out.append(b + 1)
        succ[b] = sorted(set(out))
    return blocks, succ


def dominators(succ: dict[int, list[int]], n: int) -> dict[int, int]:
    """Immediate dominator of every block reachable from block 0 (Cooper, Harvey, Kennedy)."""
    order, seen = [], set()
    stack = [(0, iter(succ.get(0, ())))] if n else []
    seen.add(0)
    while stack:
        node, it = stack[-1]
        nxt = next((s for s in it if s not in seen), None)
        if nxt is None:
            order.append(node)
            stack.pop()
        else:
            seen.add(nxt)
            stack.append((nxt, iter(succ.get(nxt, ()))))
    rpo = order[::-1]
    rank = {b: i for i, b in enumerate(rpo)}
    preds: dict[int, list[int]] = {b: [] for b in rpo}
    for b in rpo:
        for s in succ.get(b, ()):
            preds[s].append(b)
    idom = {0: 0} if n else {}
    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            done = [p for p in preds[b] if p in idom]
            new = done[0]
            for p in done[1:]:
                a, c = p, new
                while a != c:
                    while rank[a] > rank[c]:
                        a = idom[a]
                    while rank[c] > rank[a]:
                        c = idom[c]
                new = a
            if idom.get(b) != new:
                idom[b], changed = new, True
    return idom


def _dominates(idom: dict[int, int], a: int, b: int) -> bool:
    while True:
        if a == b:
            return True
        if b == idom.get(b, b):
            return False
        b = idom[b]


def natural_loops(succ: dict[int, list[int]], n: int) -> list[tuple[int, frozenset[int]]]:
    """[(header block, blocks of the loop)], one per header (back edges to it merged)."""
    idom = dominators(succ, n)
    preds: dict[int, list[int]] = {}
    for b, ss in succ.items():
        for s in ss:
            preds.setdefault(s, []).append(b)
    loops: dict[int, set[int]] = {}
    for u in sorted(idom):
        for h in succ.get(u, ()):
            if h in idom and _dominates(idom, h, u):
                body = loops.setdefault(h, {h})
                work = [u]
                while work:
                    x = work.pop()
                    if x not in body:
                        body.add(x)
                        work.extend(p for p in preds.get(x, ()) if p in idom)
    return [(h, frozenset(body)) for h, body in sorted(loops.items())]


__all__ = ["Instruction", "parse_sass", "basic_blocks", "dominators", "natural_loops"]
