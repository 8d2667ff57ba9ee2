"""Loop-IR fusion: what fuses, what the guard refuses, and that no reduction is recomputed."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from llama_layer import LlamaLayer

import deplokit
from deplokit.ir.loop_ir import Accumulate, Loop, walk
from deplokit.ir.tensor_ir import Reduction


def fuse_step(c):
    (step,) = [s for s in c.trace if s.name == "fuse"]
    return step


@pytest.mark.parametrize("module, shape", [
    (nn.RMSNorm(129), (3, 37, 129)),
    (nn.Softmax(dim=-1), (2, 5, 1000)),
    (nn.LayerNorm(37), (4, 37)),
    (nn.LogSoftmax(dim=1), (3, 129)),
])
def test_normalisations_are_one_kernel(module, shape):
    c = deplokit.compile(module, torch.randn(*shape))
    assert len(c.loop_ir.kernels) == 1
    kernel = c.loop_ir.kernels[0]
    assert kernel.name.startswith("merged_")
    # reduce phases sit inside the row loops, followed by a free loop writing the row
    kinds = [s.kind for s, _ in walk(kernel.body) if isinstance(s, Loop)]
    assert "reduce" in kinds and kinds[-1] == "free"
    assert c.check(backend="loop").ok


def test_fused_kernel_never_materialises_the_product():
    def f(x, bias, w):
        return torch.relu(torch.matmul(x + bias, w))
    c = deplokit.compile(f, torch.randn(16, 64), torch.randn(64), torch.randn(64, 16))
    assert [k.name for k in c.loop_ir.kernels] == ["merged_relu"]
    assert [b.name for b in c.loop_ir.written] == ["relu"]   # no (16, 64, 16) buffer
    assert any("kernel merged_relu fuses" in n for n in fuse_step(c).notes)


def test_guard_refuses_recomputing_an_expensive_broadcast_chain():
    # The chain on b varies along the inner axis, so inlined it would run 1000x per element.
    def f(a, b):
        chain = torch.sigmoid(torch.tanh(torch.exp(torch.sin(b)) * 3.0) + 1.0)
        return a[:, None] * chain[None, :]
    c = deplokit.compile(f, torch.randn(1000), torch.randn(64))
    notes = fuse_step(c).notes
    assert any(n.startswith("store sigmoid") and "evaluated 1e+03x per element" in n for n in notes), notes
    assert len(c.loop_ir.kernels) == 2
    assert [b.kind for b in c.loop_ir.written] == ["temp", "output"]
    assert c.check(backend="loop").ok


def test_loop_invariant_chain_is_hoisted_not_recomputed():
    def f(a, b):
        chain = torch.sigmoid(torch.tanh(torch.exp(torch.sin(a)) * 3.0) + 1.0)
        return chain[:, None] * b[None, :]
    c = deplokit.compile(f, torch.randn(64), torch.randn(1000))
    (kernel,) = c.loop_ir.kernels
    outer = kernel.body[0]
    assert isinstance(outer, Loop) and outer.extent == 64
    # every compute of the chain sits in the outer loop, before the inner one
    assert [s.op for s in outer.body if hasattr(s, "op")] == ["sin", "exp", "multiply", "tanh", "add", "sigmoid"]


def test_guard_allows_cheap_prologue_recompute():
    def f(x, bias, w):
        return (x + bias) @ w
    c = deplokit.compile(f, torch.randn(37, 129), torch.randn(129), torch.randn(129, 13))
    assert len(c.loop_ir.kernels) == 1


def test_softmax_then_matmul_stores_probabilities_not_partial_reductions():
    def f(s, v):
        return torch.softmax(s, dim=-1) @ v
    c = deplokit.compile(f, torch.randn(37, 37), torch.randn(37, 16))
    names = [k.name for k in c.loop_ir.kernels]
    assert names == ["merged_softmax", "merged_matmul"], names
    assert c.check(backend="loop").ok


def _accumulate_executions(loop_ir) -> int:
    total = 0
    for k in loop_ir.kernels:
        for s, loops in walk(k.body):
            if isinstance(s, Accumulate):
                n = 1
                for lp in loops:
                    n *= lp.extent
                total += n
    return total


def _reduction_work(tensor_ir) -> int:
    types = tensor_ir.types()
    return sum(types[n.src].numel for n in tensor_ir.nodes if isinstance(n, Reduction))


@pytest.mark.parametrize("build", [
    lambda: (lambda s, v: torch.softmax(s @ v, dim=-1) @ v.T, (torch.randn(33, 17), torch.randn(17, 33))),
    lambda: (nn.Sequential(nn.RMSNorm(64), nn.Linear(64, 48), nn.LayerNorm(48)), (torch.randn(2, 9, 64),)),
    lambda: (lambda x: F.log_softmax(x, -1) + torch.softmax(x, -1) + x.amax(-1, keepdim=True), (torch.randn(7, 129),)),
    lambda: (LlamaLayer(hidden=64, heads=4, kv_heads=2, intermediate=96), (torch.randn(1, 37, 64),)),
])
def test_every_reduction_runs_exactly_once(build):
    fn, inputs = build()
    # kernel fusion's count; attention fusion's online softmax is another algorithm
    c = deplokit.compile(fn, *inputs, config={"fuse_attention.enable": False})
    assert _accumulate_executions(c.loop_ir) == _reduction_work(c.tensor_ir)
    assert c.check(backend="loop", atol=1e-4).ok


def test_llama_layer_kernel_inventory():
    c = deplokit.compile(LlamaLayer(hidden=64, heads=4, kv_heads=2, intermediate=96), torch.randn(1, 37, 64))
    names = [k.name for k in c.loop_ir.kernels]
    # norm, q, k, v, rope(q), rope(k), attention (one flash-attention kernel: fuse_attention;
    # row fusion would re-read K and V for every query row), o_proj, norm, gate, up,
    # swiglu·down+residual (silu(gate) * up staged with down_proj's A slab: computed once per
    # element and N-block, never stored); each named by what it computes, from the module whose
    # weights it reads (analysis/computes.py)
    assert names == ["input_norm_rms_norm", "q_proj", "k_proj", "v_proj", "q_proj_rope", "k_proj_rope",
                     "q_k_v_flash_attention", "o_proj", "post_norm_add_rms_norm", "gate_proj", "up_proj",
                     "down_proj_add"], names
    assert any("staged prologue" in n for s in c.trace if s.name == "fuse" for n in s.notes)
    assert [k.name for k in c.loop_ir.kernels if k.flash is not None] == ["q_k_v_flash_attention"]
    assert all(k.flash is not None for k in c.loop_ir.kernels if k.locals)     # no row-fused kernel
    assert sum(name.endswith("rms_norm") for name in names) == 2
    # the folded rotary tables are constants, not computed at run time
    consts = {b.name for b in c.torch_ir.buffers if b.kind == "const"}
    assert {
        "cos_1",
        "sin_1",
    } <= consts  # renamed: cos and sin are C math functions (every tensor becomes a kernel parameter)
    assert not any(op.op in ("cos", "sin") for op in c.torch_ir.ops)


def test_lift_is_its_own_step_one_kernel_per_node_and_fuse_merges_them():
    # lift writes every Tensor-IR node as its own loop nest (every intermediate stored): an
    # executable Loop IR that computes what eager does; fuse then makes the kernels the
    # pipeline schedules, and `-vv` shows each as its own diff
    import numpy as np

    from deplokit.runtime.loop_interp import run_loop_ir
    from deplokit.trace import format_step
    torch.manual_seed(0)
    x = torch.randn(3, 40)
    c = deplokit.compile(nn.RMSNorm(40), x)
    (lift,) = [s for s in c.trace if s.name == "lift"]
    (fuse,) = [s for s in c.trace if s.name == "fuse"]
    lifted = lift.after
    assert lift.before is c.tensor_ir and fuse.before is lifted and fuse.after is c.loop_ir
    assert [k.name for k in lifted.kernels] == [n.name for n in c.tensor_ir.nodes]
    assert {b.name for b in lifted.written} == {n.name for n in c.tensor_ir.nodes}
    assert len(c.loop_ir.kernels) == 1 and fuse.notes and not lift.notes
    env = dict(c.values)
    env.update(c._bind((x,)))
    (got,) = run_loop_ir(lifted, env)
    np.testing.assert_allclose(np.asarray(got), nn.RMSNorm(40)(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    text = "\n".join(format_step(lift))
    assert text.startswith(">>> t:loop:lift") and "+=== ss -> ss ===" in text
