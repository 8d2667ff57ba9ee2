"""`torch.ops.deplokit.grouped_mm`: transformers' grouped_mm_fallback as an op of deplokit's
own, for programs that route tokens to experts without transformers (the LLM suite's MoE
entry, the fuzzer's routing template, `-c` texts). torch.export keeps it whole, as it keeps
transformers' op (the runs' lengths are data, so its loop cannot be traced); capture maps
both to the Torch-IR op grouped_mm (docs/moe.md)."""
from __future__ import annotations

import torch


@torch.library.custom_op("deplokit::grouped_mm", mutates_args=())
def grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Rows sorted by expert; x[start:end] @ w[e] for each expert e's run (offs: the runs'
    ends, cumulative counts), rows past the last run zero."""
    out = torch.zeros(x.shape[0], w.shape[2], dtype=x.dtype, device=x.device)
    start = 0
    for e, end in enumerate(offs.tolist()):
        if end > start:
            out[start:end] = x[start:end] @ w[e]
        start = end
    return out


@grouped_mm.register_fake
def _grouped_mm_shape(x, w, offs):
    return x.new_empty(x.shape[0], w.shape[2])
