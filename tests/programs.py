"""A corpus of programs the GPU-schedule tests run through every stage: the seeds'
examples, every kind of kernel the schedule builds, odd sizes."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from llama_layer import LlamaLayer


def _relu_matmul(x, bias, w):
    return torch.relu(torch.matmul(x + bias, w))


def _matmul(a, b):
    return a @ b


def _sdpa(causal=False, scale=None):
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)


def _sdpa_masked(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _attention_by_hand(q, k, v):
    """GPT-2's attention, written out: the same three kernels row fusion merges."""
    s = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) * (1.0 / q.shape[-1] ** 0.5)
    att = att.masked_fill(torch.triu(torch.ones(s, s), 1).bool(), float("-inf"))
    return torch.softmax(att, dim=-1) @ v


class Program(tuple):
    """(fn, inputs), unpacked as such; `config` holds the scheduling knobs the program is
    compiled with in the corpus tests (deplokit.compile(fn, *inputs, config=...))."""

    def __new__(cls, fn, inputs, config=None):
        self = super().__new__(cls, (fn, inputs))
        self.config = dict(config or {})
        return self


def config_of(entry) -> dict:
    return getattr(entry, "config", {})


def corpus():
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)
    return {
        "rms_norm_seed": (nn.RMSNorm(2048, eps=1e-6), (r(1, 32, 2048),)),
        "relu_matmul_seed": (_relu_matmul, (r(16, 64), r(64), r(64, 16))),
        "softmax_odd": (nn.Softmax(dim=-1), (r(3, 5, 1000),)),
        "layer_norm_two_axes": (nn.LayerNorm((7, 37)), (r(3, 7, 37),)),
        "log_softmax_middle": (lambda x: F.log_softmax(x, dim=1), (r(4, 129, 3),)),
        "pointwise_1000": (lambda x, y: torch.sigmoid(x) * y + 1.0, (r(1000), r(1000))),
        "gelu_3d": (nn.GELU(approximate="tanh"), (r(2, 37, 129),)),
        "matmul_odd": (lambda a, b: a @ b, (r(37, 129), r(129, 13))),
        "linear_bias": (nn.Linear(129, 37), (r(2, 5, 129),)),
        "amax_rows": (lambda x: x.amax(-1), (r(33, 65),)),
        "small_rows": (lambda x: x.sum(-1, keepdim=True) * x, (r(100, 7),)),
        "embedding": (lambda ids, w: F.embedding(ids, w) * 2.0, (torch.randint(0, 50, (3, 7), generator=g), r(50, 16))),
        "cat_slices": (lambda x: torch.cat([x[:, 3:], -x[:, :3]], dim=1), (r(5, 11),)),
        "sdpa_causal_gqa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                            (r(1, 4, 9, 16), r(1, 2, 9, 16), r(1, 2, 9, 16))),
        "llama_layer_small": (LlamaLayer(hidden=64, heads=4, kv_heads=2, intermediate=96), (r(1, 9, 64),)),
        # matmul schedules: register tile 2x4 (+ split-K 2); an LLM projection at prefill of 32
        # tokens (split-K 32 into a workspace and a reducer, register tile 1x4, padded weight tile); small M, long K
        # (split-K 32); a contiguous register layout, whose strip 009 rotates against conflicts
        "matmul_64x256x128": (_matmul, (r(64, 128), r(128, 256))),
        "llm_projection": (nn.Linear(2048, 256, bias=False), (r(1, 32, 2048),)),
        "matmul_small_m_long_k": (_matmul, (r(4, 2048), r(2048, 64))),
        "matmul_contiguous_regs": Program(_matmul, (r(128, 64), r(64, 256)),
                                          {"008_register_tile.layout": "contiguous"}),
        # stage copies: N = 40 is not a multiple of the 16-wide N tile, so the last tile's rows
        # of b cross its end (012 splits them into 32-byte atoms for TMA); a Linear whose K = 72
        # leaves a K tail loop of 8 after 4 chunks, every row 16-byte aligned (TMA / cp.async 16)
        "matmul_ragged_n": (_matmul, (r(48, 64), r(64, 40))),
        "linear_k_tail": (nn.Linear(72, 32), (r(3, 8, 72),)),
        # 128-bit global accesses (005 vector_width): SwiGLU's silu(a) * b and a residual add,
        # 4 consecutive floats per thread with float4 loads and stores (rows of 4100 mask their
        # last runs); the seeds' RMSNorm above vectorises its phases
        "swiglu_float4": (lambda a, b: F.silu(a) * b, (r(2, 16, 256), r(2, 16, 256))),
        "residual_add_float4": (lambda x, res: x + res, (r(3, 4100), r(3, 4100))),
        # last, so the programs above keep their inputs (one generator draws them all)
        **attention_programs(r, g),
    }


def attention_programs(r, g):
    """Attention in every form row fusion must keep on chip: causal or not, bool and additive
    masks (with rows a mask hides entirely), GQA and MQA, odd S / T / D, one query (decode),
    one key, head_dim 64 and 128, Dv != D, 3-d, written by hand, and TinyLlama's shape."""
    bool_mask = torch.rand(7, 9, generator=g) < 0.5
    bool_mask[3] = False            # a query that sees no key: zeros, as torch gives
    return {
        "sdpa_noncausal_hd64_odd": (_sdpa(), (r(2, 2, 37, 64), r(2, 2, 37, 64), r(2, 2, 37, 64))),
        "sdpa_causal_mqa_hd128_t129": (_sdpa(causal=True), (r(1, 2, 5, 128), r(1, 1, 129, 128), r(1, 1, 129, 128))),
        "sdpa_decode_one_query": (_sdpa(), (r(1, 8, 1, 64), r(1, 2, 37, 64), r(1, 2, 37, 64))),
        "sdpa_one_key": (_sdpa(causal=True), (r(1, 4, 1, 16), r(1, 2, 1, 16), r(1, 2, 1, 16))),
        "sdpa_bool_mask_dead_row": (_sdpa_masked, (r(2, 4, 7, 16), r(2, 4, 9, 16), r(2, 4, 9, 16), bool_mask)),
        "sdpa_float_mask_dv24": (_sdpa_masked, (r(2, 3, 5, 16), r(2, 3, 11, 16), r(2, 3, 11, 24),
                                                r(2, 1, 5, 11))),
        "sdpa_3d_scale": (_sdpa(scale=0.3), (r(4, 37, 16), r(4, 29, 16), r(4, 29, 16))),
        "attention_by_hand": (_attention_by_hand, (r(2, 3, 13, 16), r(2, 3, 13, 16), r(2, 3, 13, 16))),
        "sdpa_tinyllama_seq128": (_sdpa(causal=True), (r(1, 32, 128, 64), r(1, 4, 128, 64), r(1, 4, 128, 64))),
    }
