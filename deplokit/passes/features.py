"""The advanced features beside the core, and the config that switches each one off.

The core (docs/CORE.md) takes RMSNorm and a matmul from nn.Module to CUDA: capture,
decompose, lift and fuse, the scheduling passes' plain paths, the basic lowering, render and
the interpreters. Each feature below is an existing pass knob (passes/record.py): setting it
is an ordinary config (`deplokit.compile(..., config=core_config())`), validated like any
other, and every kernel is then compiled by the core alone. Each feature's modules are a
package beside the core (passes/flash, rows, tma, repack, split, mma; README.md in each;
cp.async's CUDA is passes/lower/cuda_cp_async.py), with its Kernel-IR statements, its CUDA
spelling and its simulation beside the core's (ir/kernel_tma.py, passes/tma/cuda_tma.py,
runtime/sim/tma.py, ...). The SASS-based cost model (tune/sass_model) is not here: only the
tuner reads it; compile never does."""
from __future__ import annotations

ADVANCED = {
    # attention's kernels become one flash kernel (passes/flash/)
    "flash_attention": {"fuse_attention.enable": False},
    # attention's scores kept a row at a time on chip (passes/rows/)
    "row_fusion": {"fuse_rows.enable": False},
    # cp.async copies of the stages, committed as groups and waited for (schedule/t013_async_copy.py,
    # passes/lower/cuda_cp_async.py; ir/kernel_cp_async.py, simulated by runtime/sim/cp_async.py): off, the
    # threads copy each stage with ordinary loads and stores
    "cp_async": {"013_async_copy.enable": False},
    # TMA bulk copies, their mbarrier rings, swizzled boxes and repacked operands (passes/tma/,
    # passes/repack/; the passes schedule/t011_tma_copy.py, t012_swizzle_smem.py; rendered by
    # passes/tma/cuda_tma.py, simulated by runtime/sim/tma.py; ir/kernel_tma.py)
    "tma": {"011_tma_copy.enable": False, "011_tma_copy.repack": False},
    # tensor cores: 008's register block as mma.sync fragments (passes/mma/; rendered by
    # passes/mma/cuda_mma.py, simulated by runtime/sim/mma.py). On by default on sm_80+ for
    # precision="tf32" programs and matmuls of half operands; off, plain FMAs of the same operands
    "tensor_cores": {"008_register_tile.mma": "off"},
    # a matmul's K spread over blocks, partials reduced in order (schedule/t003_split_matmul_k.py),
    # and stream-K's workers, which deal a grid's K chunks even without a split (passes/split/stream_k.py)
    "split_k": {"003_split_matmul_k.splits": 1, "003_split_matmul_k.reduce": "reducer"},
    # long reductions of few rows spread over blocks (passes/split/)
    "split_reduce": {"split_reduce.splits": 1},
}


def core_config(**keep: bool) -> dict:
    """The config that switches every advanced feature off, except those passed as
    `name=True` (e.g. core_config(tma=True))."""
    unknown = set(keep) - set(ADVANCED)
    if unknown:
        raise ValueError(f"no advanced feature {sorted(unknown)}; they are {sorted(ADVANCED)}")
    return {k: v for name, cfg in ADVANCED.items() if not keep.get(name) for k, v in cfg.items()}
