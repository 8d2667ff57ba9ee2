"""`deplokit compile`: compile a program and print one of its IRs (-v: with its pass
decisions; -vv: every pass's before/after diff up to that IR)."""
from __future__ import annotations

import sys

from ..analysis.inventory import format_inventory
from ..errors import DeplokitError
from ..frontend import hf
from ..frontend.models import DEFAULT_SEQ, ModelProgram, build
from ..generate.programs import build_decoder
from ..trace import format_step
from .parser import stages, usage_error
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
            # the values in effect, `requested→used` where the pass used another (trace.Decision)
            out += [f"# {step.name}: {d.kernel}: {d.knob_text()}" for d in step.decisions if d.applied and d.knobs]
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


def format_model_inventory(source: str, compilation) -> str:
    return f"# {source}: kernel inventory\n" + format_inventory(compilation.inventory())


def load_decode(args):
    """(the preset's ModelProgram, its decode-step Compilation) for `--decode`."""
    if args.expr is not None or args.path is None or args.path.endswith(".py"):
        raise usage_error(args, "--decode applies to a named model (e.g. Qwen/Qwen2.5-7B)")
    if args.layer is not None:
        raise usage_error(args, "--decode compiles the whole model's decode step, not --layer")
    if not hf.available():
        raise DeplokitError("--decode needs transformers (its static-cache exporter): pip install 'deplokit[hf]'")
    seq = DEFAULT_SEQ if args.seq is None else args.seq
    program = build(args.path, seq=1, backend="transformers")
    return program, build_decoder(program.lm, max_length=seq, target=args.target).decode, seq


def cmd_compile(args) -> int:
    if args.decode:
        program, compilation, seq = load_decode(args)
        source = program.source.rsplit(" seq ", 1)[0] + f" decode step, KV cache of {seq} positions"
    else:
        program = load_program(args)
        compilation = compile_program(program, args.target, args.tuned, args.cache, precision=args.precision)
        source = program.source if isinstance(program, ModelProgram) else None
    stage = "cuda" if args.ir == "sass" else args.ir     # sass: the machine code of the cuda stage
    if args.verbose >= 2:
        sys.stdout.write(format_trace(compilation, stage))
    text = str(compilation.sass()) if args.ir == "sass" else format_ir(compilation, stage, args.verbose)
    if args.output:
        write_atomic(args.output, text)
        print(f"wrote {args.ir} IR to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    if source is not None:   # stdout stays the IR alone; the inventory goes to stderr
        sys.stdout.flush()
        sys.stderr.write(format_model_inventory(source, compilation))
    return 0
