"""A corpus of programs the GPU-schedule tests run through every stage: the seeds'
examples, every kind of kernel the schedule builds, odd sizes."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from llama_layer import LlamaLayer


def _relu_matmul(x, bias, w):
    return torch.relu(torch.matmul(x + bias, w))


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
    }
