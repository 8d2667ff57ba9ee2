"""Loop IR → Tile IR: the scheduling passes (SCHEDULE), in order, each traced as one step.

The order lives here, in one flat tuple of pass records, as in the article:

    001 tileify                 lift outer free loops to thread axes
    002 chunk_matmul_k          chunk the K reduce into K-outer x K-inner (intra-CTA)
    003 split_matmul_k          promote the K-outer chunk loop into a grid dimension
    004 cooperative_reduce      let a block's threads share one reduce; merge with Combine
    005 blockify_launch         pick block extents; split free axes into BLOCK and THREAD
    006 chunk_reduce            chunk non-matmul reduces so their slabs fit in shared memory
    007 stage_inputs            hoist hot input slabs into Stage nodes
    008 register_tile           let each thread own a register block of a matmul
    009 permute_register_tile   reorder the register strip against bank conflicts
    010 double_buffer           promote K-outer Stages to BufferedStage (ping-pong)
    011 tma_copy                narrow BufferedStages to TMA copies (sm_90+)
    012 swizzle_smem            swizzle TMA stages' boxes, XOR every read
    013 async_copy              narrow the other stages to cp.async (sm_80+)
    014 pad_smem                pad shared-memory rows to break bank conflicts
    015 pipeline_k_outer        rotate the K-outer loop into prologue / steady state
    016 mark_unroll             annotate small inner loops for #pragma unroll

Each module ends with its record, `PASS = KernelPass("NNN_name", "tile", ...)`
(deplokit/passes/record.py); deplokit/pipeline.py splices SCHEDULE into the one pipeline."""
from __future__ import annotations

from . import (
    t001_tileify,
    t002_chunk_matmul_k,
    t003_split_matmul_k,
    t004_cooperative_reduce,
    t005_blockify_launch,
    t006_chunk_reduce,
    t007_stage_inputs,
    t008_register_tile,
    t009_permute_register_tile,
    t010_double_buffer,
    t011_tma_copy,
    t012_swizzle_smem,
    t013_async_copy,
    t014_pad_smem,
    t015_pipeline_k_outer,
    t016_mark_unroll,
)

SCHEDULE = tuple(m.PASS for m in (
    t001_tileify, t002_chunk_matmul_k, t003_split_matmul_k, t004_cooperative_reduce, t005_blockify_launch,
    t006_chunk_reduce, t007_stage_inputs, t008_register_tile, t009_permute_register_tile, t010_double_buffer,
    t011_tma_copy, t012_swizzle_smem, t013_async_copy, t014_pad_smem, t015_pipeline_k_outer,
    t016_mark_unroll))
