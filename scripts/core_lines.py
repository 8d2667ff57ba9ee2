"""Write docs/CORE.md ("Read the core") with each file's line count, or check that it is current.

    python scripts/core_lines.py           # rewrite docs/CORE.md
    python scripts/core_lines.py --check   # exit 1 if docs/CORE.md is stale (tests/test_core_doc.py)

The reading order and the three reading paths are written here, the counts are measured."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "CORE.md"

# (section, [(file, what to read it for)]) in reading order: RMSNorm and a matmul from nn.Module to CUDA
CORE = [
    ("1. The driver: one flat pass tuple and its trace", [
        ("deplokit/compilation.py", "deplokit.compile: capture, lower, run, check"),
        ("deplokit/pipeline.py", "PIPELINE: every pass after capture, in order"),
        ("deplokit/passes/record.py", "Pass / KernelPass, knobs, Skip / Noted: the one protocol"),
        ("deplokit/trace.py", "Context and TraceStep: what each pass leaves"),
        ("deplokit/target.py", "the GPU a compilation targets"),
    ]),
    ("2. Capture: nn.Module -> Torch IR", [
        ("deplokit/frontend/capture.py", "torch.export, then one Torch-IR op per aten call"),
        ("deplokit/frontend/aten_table.py", "which aten ops are understood, and as what"),
        ("deplokit/ir/types.py", "tensor types and buffers"),
        ("deplokit/ir/torch_ir.py", "the Torch IR"),
    ]),
    ("3. Decompose: Torch IR -> Tensor IR", [
        ("deplokit/ir/tensor_ir.py", "the Tensor IR: elementwise, reduce, index-map nodes"),
        ("deplokit/passes/decompose/registry.py", "one rule per op"),
        ("deplokit/passes/decompose/builder.py", "what the rules build with"),
        ("deplokit/passes/decompose/rms_norm.py", "RMSNorm's rule"),
        ("deplokit/passes/decompose/matmul.py", "a matmul as broadcast, multiply, sum"),
    ]),
    ("4. Lift and fuse: Tensor IR -> Loop IR", [
        ("deplokit/ir/index.py", "affine index expressions"),
        ("deplokit/ir/loop_ir.py", "the Loop IR"),
        ("deplokit/passes/fuse/lift.py", "one loop nest per Tensor-IR node"),
        ("deplokit/passes/fuse/build.py", "producers folded into consumers"),
        ("deplokit/passes/fuse/guard.py", "the fusion guard: what is stored"),
    ]),
    ("5. Schedule: Loop IR -> Tile IR (the plain paths)", [
        ("deplokit/ir/tile_ir.py", "the Tile IR: axes, Stage, StridedLoop, Combine"),
        ("deplokit/passes/schedule/__init__.py", "SCHEDULE, the article's passes in order"),
        ("deplokit/passes/schedule/t001_tileify.py", "free loops become thread axes"),
        ("deplokit/passes/schedule/t002_chunk_matmul_k.py", "K chunked"),
        ("deplokit/passes/schedule/t004_cooperative_reduce.py", "a block's threads share a row"),
        ("deplokit/passes/schedule/t005_blockify_launch.py", "blocks and threads, float4"),
        ("deplokit/passes/schedule/t007_stage_inputs.py", "hot slabs staged in shared memory"),
        ("deplokit/passes/schedule/t008_register_tile.py", "a register block per thread"),
        ("deplokit/passes/schedule/t016_mark_unroll.py", "#pragma unroll"),
    ]),
    ("6. Lower and render: Tile IR -> Kernel IR -> CUDA", [
        ("deplokit/ir/kernel_ir.py", "the Kernel IR: C-like statements"),
        ("deplokit/passes/lower/__init__.py", "LOWERING, the Kernel-IR passes in order"),
        ("deplokit/passes/lower/k001_materialize.py", "Tile IR -> Kernel IR"),
        ("deplokit/passes/lower/k002_stage_copies.py", "a Stage becomes the threads' copy"),
        ("deplokit/passes/lower/cuda.py", "Kernel IR printed as CUDA"),
    ]),
    ("7. Run it without a GPU: the interpreters", [
        ("deplokit/runtime/tensor_interp.py", "Tensor IR with numpy"),
        ("deplokit/runtime/loop_interp.py", "Loop IR with numpy"),
        ("deplokit/runtime/sim/exec.py", "Kernel IR, thread by thread"),
    ]),
]

PATHS = [
    ("How RMSNorm becomes one kernel", [
        "deplokit/passes/decompose/rms_norm.py", "deplokit/passes/fuse/lift.py", "deplokit/passes/fuse/build.py",
        "deplokit/passes/fuse/guard.py", "deplokit/passes/schedule/t001_tileify.py",
        "deplokit/passes/schedule/t004_cooperative_reduce.py", "deplokit/passes/schedule/t005_blockify_launch.py",
        "deplokit/passes/lower/k001_materialize.py"]),
    ("What 007 does", [
        "deplokit/passes/schedule/t007_stage_inputs.py", "deplokit/ir/stages.py", "tests/test_pass_007.py"]),
    ("How a Stage becomes CUDA", [
        "deplokit/ir/tile_ir.py", "deplokit/passes/lower/k002_stage_copies.py", "deplokit/passes/lower/stage_plan.py",
        "deplokit/passes/lower/stage_units.py", "deplokit/passes/lower/cuda.py"]),
]

ADVANCED = [
    ("flash attention", "fuse_attention.enable", ["deplokit/passes/flash/attention.py",
     "deplokit/passes/flash/attention_loop.py", "deplokit/passes/flash/attention_match.py",
     "deplokit/passes/flash/attention_plan.py", "deplokit/passes/flash/flash_registers.py",
     "deplokit/passes/flash/flash_stage.py", "deplokit/passes/flash/flash_tile.py"]),
    ("row fusion", "fuse_rows.enable", ["deplokit/passes/rows/rows.py", "deplokit/passes/rows/row_cost.py"]),
    ("cp.async copies", "013_async_copy.enable",
     ["deplokit/passes/schedule/t013_async_copy.py", "deplokit/ir/kernel_cp_async.py",
      "deplokit/passes/lower/cuda_cp_async.py", "deplokit/runtime/sim/cp_async.py"]),
    ("TMA copies, mbarrier rings, swizzle, repack", "011_tma_copy.enable / .repack",
     ["deplokit/passes/schedule/t011_tma_copy.py", "deplokit/passes/schedule/t012_swizzle_smem.py",
      "deplokit/passes/repack/repack.py", "deplokit/passes/tma/tma_geometry.py",
      "deplokit/passes/tma/mbarrier_ring.py", "deplokit/ir/swizzle.py",
      "deplokit/passes/tma/cuda_tma.py", "deplokit/runtime/sim/tma.py", "deplokit/ir/kernel_tma.py"]),
    ("tensor cores (mma.sync)", '008_register_tile.mma = "off"',
     ["deplokit/passes/mma/mma_tile.py", "deplokit/passes/mma/mma_lower.py", "deplokit/passes/mma/cuda_mma.py",
      "deplokit/runtime/sim/mma.py", "deplokit/runtime/warp_mma.py", "deplokit/ir/fragments.py",
      "deplokit/ir/tile_mma.py",
      "deplokit/ir/kernel_mma.py"]),
    ("split-K, stream-K", '003_split_matmul_k.splits = 1, .reduce = "reducer"',
     ["deplokit/passes/schedule/t003_split_matmul_k.py", "deplokit/passes/schedule/grid_plan.py",
      "deplokit/passes/split/split_tail.py", "deplokit/passes/split/cuda_split.py",
      "deplokit/passes/split/stream_k.py", "deplokit/ir/stream_k.py",
      "deplokit/runtime/sim/split.py", "deplokit/ir/kernel_split.py"]),
    ("wgmma (sm_90a)", '008_register_tile.mma = "half"',
     ["deplokit/passes/wgmma/wgmma_tile.py", "deplokit/passes/wgmma/wgmma_lower.py",
      "deplokit/passes/wgmma/warp_roles.py", "deplokit/ir/kernel_wgmma.py", "deplokit/passes/wgmma/cuda_wgmma.py",
      "deplokit/runtime/sim/wgmma.py"]),
    ("split-reduce", "split_reduce.splits = 1", ["deplokit/passes/split/split_reduce.py"]),
    ("the SASS-based cost model", "(the tuner only: compile never reads it)",
     ["deplokit/tune/cost_model.py", "deplokit/tune/sass_model/main_loop.py", "deplokit/analysis/sass.py"]),
]


def lines(path: str) -> int:
    return len((ROOT / path).read_text().splitlines())


def render() -> str:
    out = ["# Read the core", "",
           "The files a student needs to follow RMSNorm and a matmul from `nn.Module` to CUDA, in reading",
           "order, with their line counts (written by `scripts/core_lines.py`; `tests/test_core_doc.py`",
           "keeps the counts true). Everything else is an advanced feature (below) or tooling (the",
           "tuner, the notebook widgets, the benchmarks).", ""]
    total = 0
    for section, files in CORE:
        out += [f"## {section}", "", "| file | lines | read it for |", "|---|---:|---|"]
        for f, why in files:
            n = lines(f)
            total += n
            out.append(f"| [`{f}`](../{f}) | {n} | {why} |")
        out.append("")
    out += [f"**The core: {sum(len(f) for _, f in CORE)} files, {total} lines.**", "",
            "## Three reading paths", ""]
    for title, files in PATHS:
        n = sum(lines(f) for f in files)
        out += [f"### {title} ({len(files)} files, {n} lines)", ""]
        out += [f"1. [`{f}`](../{f}) ({lines(f)} lines)" for f in files]
        out.append("")
    out += ["## The advanced features, and the switch that turns each off", "",
            "`deplokit.passes.features.core_config()` switches all of them off at once",
            "(`deplokit.compile(fn, *inputs, config=core_config())`); `tests/test_core_only.py` runs the",
            "core's programs that way.", "", "| feature | switch | files | lines |", "|---|---|---|---:|"]
    for name, switch, files in ADVANCED:
        links = ", ".join(f"[`{Path(f).name}`](../{f})" for f in files)
        out.append(f"| {name} | `{switch}` | {links} | {sum(lines(f) for f in files)} |")
    return "\n".join(out) + "\n"


def main(argv) -> int:
    text = render()
    if "--check" in argv:
        if not DOC.exists() or DOC.read_text() != text:
            print("docs/CORE.md is stale: run python scripts/core_lines.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
