"""`deplokit compile`: compile a program and print one of its IRs (-v: with its pass
decisions; -vv: every pass's before/after diff up to that IR)."""
from __future__ import annotations

import sys

from ..analysis.inventory import format_inventory
from ..frontend.models import ModelProgram
from ..trace import format_step
from .parser import stages
from .program import compile_program, load_program, write_atomic


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
