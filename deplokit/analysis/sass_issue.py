"""Who issues a K loop's instructions: every warp, or only the elected producer.

A loop's static count (analysis/sass.py) weighs each instruction as if every warp issued it.
In a TMA ring the producer's waits, arrivals and copies sit behind an elect.sync in warp 0
(ELECT in SASS): one warp issues them, the other warps branch around. And nvcc places the
slow paths of the loop out of line, after the kernel's EXIT: a failed mbarrier poll's retry
(YIELD, the poll again, a branch back), a divergent warp's election (BRA.DIV's target); a
step whose polls succeed and whose warp 0 is converged issues none of them.

    split = issue_split(kernel_sass, loop)
    split.consumer, split.producer, split.cold      # instructions of each kind
    split.slots_per_warp(warps)                      # consumer + producer / warps

so that a loop whose producer only one warp runs compares with a cp.async loop (no
producer: every warp issues its own copies) by the issue slots a warp spends on average.
The split counts each instruction once; where nvcc kept a k loop inside the K loop (a big
register tile), `slots_per_k_step` runs that loop as many passes as a K step's FFMA take.
"""
from __future__ import annotations

from dataclasses import dataclass

from .sass_parse import basic_blocks, dominators


@dataclass(frozen=True)
class IssueSplit:
    consumer: int        # instructions every warp issues in a step (cold paths excluded)
    producer: int        # instructions only the elected producer's warp issues
    cold: int            # out-of-line slow paths (after EXIT): issued only when a poll fails

    def slots_per_warp(self, warps: int) -> float:
        """Issue slots one step costs a warp on average: the producer's shared by the warps."""
        return self.consumer + self.producer / max(warps, 1)


def issue_split(kernel, loop) -> IssueSplit:
    """The instructions of `loop` (a SassLoop of `kernel`, a KernelSass) by who issues them."""
    instrs = list(kernel.instructions)
    blocks, succ = basic_blocks(instrs)
    exits = [ins.address for ins in instrs if ins.base == "EXIT" and not ins.predicate]
    first_exit = min(exits) if exits else None
    # a slow path rejoins the loop after the election it stands in for: leave its edges out,
    # so that the ELECT still dominates the producer's instructions
    hot = {b: ([] if first_exit is not None and instrs[f].address > first_exit else out)
           for b, ((f, _), out) in enumerate(zip(blocks, (succ[b] for b in range(len(blocks)))))}
    idom = dominators(hot, len(blocks))
    block_of = {}
    for b, (first, last) in enumerate(blocks):
        for i in range(first, last + 1):
            block_of[instrs[i].address] = b
    members = set(loop.addresses)
    elect_blocks = {block_of[ins.address] for ins in instrs if ins.address in members and ins.base == "ELECT"}

    def elected(b) -> bool:
        seen = set()
        while b not in seen and b in idom:
            if b in elect_blocks:
                return True
            seen.add(b)
            b = idom[b]
        return False

    consumer = producer = cold = 0
    by_address = {ins.address: ins for ins in instrs}
    for a in loop.addresses:
        ins = by_address[a]
        if not ins.counted:
            continue
        if first_exit is not None and a > first_exit:
            cold += 1
        elif elected(block_of[a]):
            producer += 1
        else:
            consumer += 1
    return IssueSplit(consumer, producer, cold)


def slots_per_k_step(kernel, loop, warps: int, ffma_per_step: int) -> float:
    """Issue slots a warp spends on one step of the K loop `loop` on average, the k loops nvcc
    kept inside it run for the `ffma_per_step` FFMA one thread does per K step (TM x TN x k
    chunk): a loop inside holding F of the loop's FFMA counts its instructions once per F."""
    slots = issue_split(kernel, loop).slots_per_warp(warps)
    inner = [lp for lp in kernel.loops if lp.parent == loop.index and lp.mix.ffma]
    in_loops = sum(lp.mix.ffma for lp in inner)
    if in_loops:
        passes = (ffma_per_step - (loop.mix.ffma - in_loops)) / in_loops     # of every inner loop
        slots += (passes - 1) * sum(lp.mix.instructions for lp in inner)
    return slots


__all__ = ["IssueSplit", "issue_split", "slots_per_k_step"]
