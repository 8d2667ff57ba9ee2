"""Small programs the tuning tests share: spaces small enough to search exhaustively."""
import functools

import torch
from torch import nn

import deplokit


def _matmul(a, b):
    return a @ b


def _two_softmaxes(x, y):
    return torch.softmax(x, -1), torch.softmax(y, -1)


@functools.lru_cache(maxsize=None)
def compiled(name: str):
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)
    programs = {
        "rms_norm": (nn.RMSNorm(2048), (r(1, 32, 2048),)),
        "rms_norm_odd": (nn.RMSNorm(100), (r(3, 7, 100),)),
        "matmul_odd": (_matmul, (r(37, 129), r(129, 13))),
        "softmax": (nn.Softmax(dim=-1), (r(3, 5, 1000),)),
        "two_softmaxes": (_two_softmaxes, (r(4, 64), r(4, 64))),
    }
    fn, inputs = programs[name]
    return deplokit.compile(fn, *inputs)
