"""A Llama-style decoder layer in plain torch (no transformers), shared by benchmarks and tests."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class LlamaLayer(nn.Module):
    def __init__(self, hidden=2048, heads=32, kv_heads=4, intermediate=5632, theta=10000.0, eps=1e-5,
                 gqa="enable_gqa"):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.gqa = gqa    # enable_gqa: sdpa reads the shared heads; repeat_kv: Hugging Face's expand + reshape
        self.input_norm = nn.RMSNorm(hidden, eps=eps)
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.post_norm = nn.RMSNorm(hidden, eps=eps)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @staticmethod
    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def forward(self, x):
        b, s, _ = x.shape
        pos = torch.arange(s, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        h = self.input_norm(x)
        q = self.q_proj(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + self.rotate_half(q) * sin
        k = k * cos + self.rotate_half(k) * sin
        if self.gqa == "enable_gqa":
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            n = self.heads // self.kv_heads
            k = k[:, :, None].expand(b, self.kv_heads, n, s, self.head_dim).reshape(b, self.heads, s, self.head_dim)
            v = v[:, :, None].expand(b, self.kv_heads, n, s, self.head_dim).reshape(b, self.heads, s, self.head_dim)
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, s, -1))
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))
