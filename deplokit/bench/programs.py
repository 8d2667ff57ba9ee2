"""The torch side of the LLM kernel suite (bench/suite.py): each entry's program and its
seeded inputs. Kept apart so that listing the suite never loads torch."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..frontend.moe_ops import grouped_mm


def entry_program(e):
    """The function of entry `e`'s inputs that deplokit, eager and torch.compile run."""
    return _PROGRAMS[e.op](e)


def entry_inputs(e, seed: int = 0, device="cpu", empty: bool = False) -> tuple[torch.Tensor, ...]:
    """Seeded inputs (`empty`: uninitialised, for compiling only). Matmul weights are
    scaled by 1/sqrt(K) so outputs stay O(1) and FP32 comparisons stay meaningful."""
    dtype = getattr(torch, e.dtype)
    if empty:
        return tuple(torch.empty(s, device=device, dtype=dtype) for s in e.shapes)
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, s in enumerate(e.shapes):
        t = torch.randn(s, generator=g)
        if e.op.startswith(("matmul", "silu_mul_matmul")) and i == (2 if e.op == "silu_mul_matmul" else 1):
            t = t / math.sqrt(s[0])
        if e.op == "moe" and i > 0:     # router and experts: (E, N, K) weights, scaled by 1/sqrt(K)
            t = t / math.sqrt(s[-1])
        out.append(t.to(device=device, dtype=dtype))
    return tuple(out)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def sdpa_repeated_kv(q, k, v):
    """Causal SDPA with each K/V head repeated to the query heads it serves (no enable_gqa)."""
    groups = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1),
                                          is_causal=True)


def _program_rmsnorm(e):
    hidden, eps = e.shapes[1][0], e.eps

    def rmsnorm(x, weight):
        return F.rms_norm(x, (hidden,), weight, eps)
    return rmsnorm


def _program_naive_attn(e):
    scale = 1.0 / math.sqrt(e.shapes[0][-1])

    def naive_attn(q, k, v):
        return torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, dim=-1) @ v
    return naive_attn


def _program_moe(e):
    """A Mixtral sparse block as transformers routes it: softmax router, top-k weights
    normalised, assignments sorted by expert, counted (histc) into runs, two grouped matmuls
    (SwiGLU between), weighted, un-sorted and summed per token (docs/moe.md)."""
    top_k = e.top_k

    def moe(x, router, gate_up, down):
        experts, hidden = router.shape
        h = x.reshape(-1, hidden)
        probs = torch.softmax(h @ router.t(), dim=-1)
        weights, chosen = torch.topk(probs, top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        ids, order = torch.sort(chosen.reshape(-1), stable=True)
        offs = torch.cumsum(torch.histc(ids.float(), experts, 0, experts - 1), 0, dtype=torch.int32)
        gate, up = grouped_mm(h[order // top_k], gate_up.transpose(1, 2), offs).chunk(2, dim=-1)
        y = grouped_mm(F.silu(gate) * up, down.transpose(1, 2), offs) * weights.reshape(-1)[order, None]
        back = torch.empty_like(order).index_put_((order,), torch.arange(order.numel(), device=order.device))
        return y[back].reshape(h.shape[0], top_k, hidden).sum(dim=1).reshape(x.shape)
    return moe


_PROGRAMS = {
    "matmul": lambda e: (lambda x, w: torch.matmul(x, w)),
    "matmul_bias": lambda e: (lambda x, w, b: torch.matmul(x, w) + b),
    "matmul_add": lambda e: (lambda x, w, residual: torch.matmul(x, w) + residual),
    "rmsnorm": _program_rmsnorm,
    "rope": lambda e: (lambda x, cos, sin: x * cos + _rotate_half(x) * sin),
    "softmax": lambda e: (lambda scores: torch.softmax(scores, dim=-1)),
    "sdpa": lambda e: (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)),
    "naive_attn": _program_naive_attn,
    "silu_mul": lambda e: (lambda gate, up: F.silu(gate) * up),
    "silu_mul_matmul": lambda e: (lambda gate, up, w: torch.matmul(F.silu(gate) * up, w)),
    "add": lambda e: (lambda x, residual: x + residual),
    "moe": _program_moe,
}
