"""The first-principles floor's FLOPs (analysis/traffic.floor_flops, tune/cost_model.
first_principles_us): a value counts over the loops it depends on, so a prologue staged
inside a contraction's K loop (down(silu(gate) * up), one kernel) counts once per element of
its operand, not once per output column; a plain contraction counts as loop_kernel_flops."""
import torch
import torch.nn.functional as F

import deplokit
from deplokit.analysis.traffic import floor_flops, loop_kernel_flops
from deplokit.ir.loop_ir import Accumulate, Loop, walk

M, K, N = 64, 128, 96


def _inputs(*shapes):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*s, generator=g) for s in shapes]


def test_a_staged_prologue_counts_once_per_element_of_its_operand():
    c = deplokit.compile(lambda g, u, w: torch.matmul(F.silu(g) * u, w), *_inputs((1, M, K), (1, M, K), (K, N)))
    (kernel,) = [k for k in c.loop_ir.kernels if any(isinstance(s, Accumulate) for s, _ in walk(k.body))]
    assert len(c.loop_ir.kernels) == 1                      # the prologue is inside the K loop
    full, floor = loop_kernel_flops(kernel), floor_flops(kernel)
    mnk = M * N * K
    prologue = (full - 2 * mnk) // mnk                      # silu and the multiply, per (m, n, k)
    assert prologue >= 2 and full == (2 + prologue) * mnk
    assert floor == 2 * mnk + prologue * M * K              # ... counted once per (m, k)


def test_a_plain_matmul_and_softmax_count_every_loop():
    for fn, shapes in ((torch.matmul, ((M, K), (K, N))), (lambda x: F.softmax(x, -1), ((M, K),))):
        c = deplokit.compile(fn, *_inputs(*shapes))
        for k in c.loop_ir.kernels:
            assert any(isinstance(s, Loop) for s in k.body)
            assert floor_flops(k) == loop_kernel_flops(k) > 0
