"""`deplokit compile`: compile a program and print one of its IRs (-v: with its pass
decisions; -vv: every pass's before/after diff up to that IR)."""
from __future__ import annotations

import sys

from ..analysis.inventory import format_inventory
from ..frontend.models import MODEL_DTYPES, ModelProgram
from ..precision import DEFAULT_PRECISION, PRECISIONS
from ..trace import format_step
from .parser import TRUST_NOTE, add_command, add_source, stages
from .program import compile_program, load_program, write_atomic


def add_parser(sub) -> None:
    pc = add_command(sub, "compile", cmd_compile, help="compile a program and print one of its IRs",
                     description="Compile a program and print one of its IRs.", epilog="Note: " + TRUST_NOTE)
    add_source(pc)
    pc.add_argument("--ir", choices=stages() + ["sass"], default="cuda",
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
    pc.add_argument("--dtype", choices=list(MODEL_DTYPES),
                    help="for a named model: the weights' and activations' dtype (default float32); "
                         "half tensors are stored in half and computed in float32 (docs/precision.md)")
    pc.add_argument("--precision", choices=list(PRECISIONS), default=DEFAULT_PRECISION,
                    help="how float32 matmuls multiply: float32 (exact) or tf32 (operands rounded to "
                         "TF32, as torch's allow_tf32) (default: %(default)s)")


def _lines(text) -> list[str]:
    if text is None:
        return []
    if isinstance(text, (list, tuple)):
        return [str(x) for x in text]
    return str(text).splitlines()


def format_ir(compilation, stage: str, verbose: int) -> str:
    """The IR text of `stage`; with verbose, its header and the decisions of its passes."""
    ir = compilation.ir(stage)
    out: list[str] = []
    if verbose >= 1:
        header = getattr(ir, "header", None)
        if header is not None:
            out += _lines(header())
        for step in compilation.trace:
            if step.stage != stage:
                continue
            if step.skipped_reason:
                out.append(f"# {step.name}: skipped: {step.skipped_reason}")
                continue
            out += [f"# {step.name}: {kernel}: " + ", ".join(f"{k}={v}" for k, v in knobs)
                    for kernel, knobs in step.params if knobs]
            out += [f"# {step.name}: {remark}" for remark in step.remarks]   # program notes, then per kernel
    out += _lines(str(ir))
    return "\n".join(out) + "\n"


def format_trace(compilation, stage: str) -> str:
    """Every trace step up to `stage` as a unified diff of its before and after text between
    `>>> TAG` and `<<< TAG`, or one line `--- TAG skipped: <reason>` for a step that changed
    nothing. A Tile-IR pass is tagged `t:NNN_name` (so `awk '/^>>> t:007/,/^<<< t:007/'`
    cuts one out), any other step `t:<stage>:<name>`."""
    order = stages()
    upto = set(order[:order.index(stage) + 1])
    out: list[str] = []
    for step in compilation.trace:
        if step.stage not in upto or step.name == "capture":
            continue
        out += format_step(step)
    return "\n".join(out) + "\n"


def format_model_inventory(program, compilation) -> str:
    return f"# {program.source}: kernel inventory\n" + format_inventory(compilation.inventory())


def cmd_compile(args) -> int:
    program = load_program(args)
    compilation = compile_program(program, args.target, args.tuned, args.cache, precision=args.precision)
    stage = "cuda" if args.ir == "sass" else args.ir     # sass: the machine code of the cuda stage
    if args.verbose >= 2:
        sys.stdout.write(format_trace(compilation, stage))
    text = str(compilation.sass()) if args.ir == "sass" else format_ir(compilation, stage, args.verbose)
    if args.output:
        write_atomic(args.output, text)
        print(f"wrote {args.ir} IR to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    if isinstance(program, ModelProgram):   # stdout stays the IR alone; the inventory goes to stderr
        sys.stdout.flush()
        sys.stderr.write(format_model_inventory(program, compilation))
    return 0
