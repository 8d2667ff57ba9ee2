"""Shared by the golden before/after pass tests (tests/test_pass_*.py): the small programs
whose IR the passes are shown on, and one pass run alone on the IR its predecessors left.

The IR a pass is given comes from the pipeline's trace of a tiny program and is pinned as
text in each test (BEFORE), so the example stays the one meant; the pass then runs alone,
with every knob set explicitly in the config, and its printed result is compared with the
text expected. Each test module lists the passes it covers in `GOLDEN`; test_pass_registry.py
fails when a pass of the pipeline has no golden test."""
from __future__ import annotations

import functools

import torch

import deplokit
from deplokit.pipeline import PIPELINE
from deplokit.trace import Context

BY_NAME = {p.name: p for p in PIPELINE}


def _programs():
    torch.manual_seed(0)
    return {
        # one 32x64 @ 64x32 matmul: 16x16 threads of 2x2 blocks, K chunked by 16
        "matmul": (lambda a, b: a @ b, (torch.randn(32, 64), torch.randn(64, 32)), {}),
        # few outputs, a long K: 003 splits K over the grid and adds a reducer kernel
        "matmul_long_k": (lambda a, b: a @ b, (torch.randn(16, 1024), torch.randn(1024, 16)), {}),
        # 008 in its "contiguous" layout: a thread's outputs adjacent, so the strip's reads clash (009)
        "matmul_contiguous": (lambda a, b: a @ b, (torch.randn(32, 64), torch.randn(64, 32)),
                              {"008_register_tile.layout": "contiguous"}),
        # TMA forced (the default keeps cp.async for register blocks this small)
        "matmul_tma": (lambda a, b: a @ b, (torch.randn(32, 64), torch.randn(64, 32)), {"011_tma_copy.enable": True}),
        "matmul_long_k_tma": (lambda a, b: a @ b, (torch.randn(16, 1024), torch.randn(1024, 16)),
                              {"011_tma_copy.enable": True, "003_split_matmul_k.reduce": "reducer"}),
        # a linear layer's weight tile is read along its rows: a column conflict 014 pads away
        "linear": (torch.nn.functional.linear, (torch.randn(16, 64), torch.randn(32, 64)),
                   {"011_tma_copy.enable": False}),
        "attention": (torch.nn.functional.scaled_dot_product_attention,
                      (torch.randn(1, 1, 64, 32), torch.randn(1, 1, 64, 32), torch.randn(1, 1, 64, 32)), {}),
        # flash attention off: row fusion keeps a row of scores on chip (the cost check off: at
        # this toy size the fused kernel moves more bytes than the three kernels)
        "attention_rows": (torch.nn.functional.scaled_dot_product_attention,
                           (torch.randn(1, 1, 16, 8), torch.randn(1, 1, 16, 8), torch.randn(1, 1, 16, 8)),
                           {"fuse_attention.enable": False, "fuse_rows.by_cost": False}),
        # two kernels of one structure (dedup keeps one, both launches run it)
        "twice": (lambda x, y: (torch.relu(x) + 1, torch.relu(y) + 1), (torch.randn(4, 64), torch.randn(4, 64)), {}),
        "layer_norm": (torch.nn.LayerNorm(64), (torch.randn(4, 64),), {}),
        "softmax": (lambda x: torch.softmax(x, -1), (torch.randn(4, 256),), {}),
        "rms_norm": (torch.nn.RMSNorm(64), (torch.randn(4, 64),), {}),
        # rows too long for a 16 KiB shared-memory budget (split_reduce off: one block reduces a row)
        "softmax_long": (lambda x: torch.softmax(x, -1), (torch.randn(2, 5003),),
                         {"split_reduce.splits": 1, "006_chunk_reduce.smem_budget": 16384}),
        # few rows of 20 000: split_reduce spreads each row over blocks
        "softmax_few_rows": (lambda x: torch.softmax(x, -1), (torch.randn(2, 20000),), {}),
    }


PROGRAMS = _programs()
DEDUP = {"twice"}        # compiled with dedup=True


@functools.cache
def compiled(program: str, target: str = "sm_90"):
    fn, inputs, config = PROGRAMS[program]
    return deplokit.compile(fn, *inputs, target=target, config=config, dedup=program in DEDUP)


def before(program: str, pass_name: str, target: str = "sm_90"):
    """The IR `pass_name` is given when `program` is compiled for `target`."""
    (step,) = [s for s in compiled(program, target).trace if s.name == pass_name]
    return step.before


def run_alone(pass_name: str, ir, config: dict, target: str = "sm_90", dedup: bool = False):
    """The trace step of pass `pass_name` run alone on `ir` with the knobs in `config`."""
    return BY_NAME[pass_name].run(ir, Context(deplokit.target.get_target(target), config, dedup))


def decisions(step) -> dict:
    """kernel -> the knob values it was rewritten with, or its skip reason."""
    return {d.kernel: d.skipped or d.knobs for d in step.decisions}


@functools.cache
def check_passes(program: str, target: str = "sm_90"):
    """Each tile pass's simulator check of `program` against PyTorch (Compilation.check_passes)."""
    return tuple(compiled(program, target).check_passes())
