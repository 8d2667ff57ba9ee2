"""The `deplokit` command line.

    deplokit compile -c EXPR | PATH [--ir STAGE] [--target T] [-v|-vv] [-o FILE]
    deplokit compile MODEL [--seq N] [--layer N] [--ir STAGE] ...  (a preset, e.g. Qwen/Qwen2.5-7B)
    deplokit run     -c EXPR | PATH [--backend B] [--target T] [--bench] [--profile]
    deplokit bench   --suite llm [--list] [--filter S] [--compile-only]   (cli_bench.py)
    deplokit tune    -c EXPR | PATH [-v] [--budget N] [--objective model|gpu] [--cache PATH]  (cli_tune.py)

compile and run use the tuned configs the tune cache holds for the program's kernels.

Every DeplokitError is printed as one line, `deplokit: error: <message>`, with exit code 2
(as argparse does for usage errors). Any other exception is a bug in deplokit and keeps its
traceback.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

from . import __version__, cli_tune
from .errors import DeplokitError

TRUST_NOTE = ("-c evaluates Python code, with the same trust as running a script: "
              "only pass code you would run yourself.")

EXPR_HELP = ("Python code to compile, with torch, nn (torch.nn) and F (torch.nn.functional) in scope, "
             "e.g. 'nn.RMSNorm(2048)(torch.randn(1,32,2048))'. Statements may precede the final "
             "expression, separated by ';' or newlines. Tensor-factory calls (torch.randn, zeros, "
             "arange, ...) become the program's inputs. " + TRUST_NOTE)

PATH_HELP = ("a .py file defining `model` (nn.Module or function) and `inputs` (tuple of tensors), "
             "or a built-in model preset (compile only): TinyLlama/TinyLlama-1.1B-Chat-v1.0, Qwen/Qwen2.5-7B")


def stages() -> list[str]:
    """The stages a Compilation builds, in order: torch, tensor, loop, tile, kernel, cuda."""
    from .pipeline import STAGES
    return list(STAGES)


def _backends() -> list[str]:
    from .compilation import BACKENDS
    return list(BACKENDS)


def auto_backend() -> str:
    """The backend `auto` runs on: cupy when a CUDA device is present, else the simulator."""
    from .compilation import resolve_backend
    return resolve_backend("auto")


# -- argument parsing ---------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from .target import TARGETS

    parser = argparse.ArgumentParser(
        prog="deplokit",
        description="deplokit: a teaching compiler that lowers PyTorch programs through inspectable IRs "
                    f"({' -> '.join(stages())}).",
        epilog="Note: " + TRUST_NOTE,
    )
    parser.add_argument("--version", action="version", version=f"deplokit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add_source(p, tuned_cache=True):
        p.add_argument("-c", dest="expr", metavar="EXPR", help=EXPR_HELP)
        p.add_argument("path", nargs="?", metavar="PATH", help=PATH_HELP)
        p.add_argument("--target", choices=list(TARGETS), default="sm_90",
                       help="GPU architecture to compile for (default: %(default)s)")
        if tuned_cache:
            p.add_argument("--cache", metavar="PATH", help="read tuned configs from this " + cli_tune.cache_help())
            p.add_argument("--no-tuned", dest="tuned", action="store_false",
                           help="ignore the tuned configs in the cache: the passes' default heuristics")

    pc = sub.add_parser("compile", help="compile a program and print one of its IRs",
                        description="Compile a program and print one of its IRs.", epilog="Note: " + TRUST_NOTE)
    add_source(pc)
    pc.set_defaults(subparser=pc)
    names = stages()
    pc.add_argument("--ir", choices=names + ["sass"], default="cuda",
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

    pr = sub.add_parser("run", help="run a program and check it against torch eager",
                        description="Run a compiled program on its example inputs and compare with torch eager. "
                                    "Exit status 1 on a mismatch.", epilog="Note: " + TRUST_NOTE)
    add_source(pr)
    pr.set_defaults(subparser=pr)
    pr.add_argument("--backend", choices=_backends(), default="auto",
                    help="which IR executes it (default: %(default)s = cupy with a CUDA device, else sim)")
    from .cli_bench import add_bench_parser, add_run_args
    add_run_args(pr)
    add_bench_parser(sub, TARGETS)
    cli_tune.add_parser(sub, add_source)
    return parser


def load_program(args, parser):
    from .frontend.expression import load_expression
    from .frontend.pyfile import load_file

    if args.expr is not None and args.path is not None:
        parser.error("give either -c EXPR or PATH, not both")
    if args.expr is None and args.path is None:
        parser.error("give a program: -c EXPR or PATH (a .py file)")
    model_flags = [f for f in ("seq", "layer") if getattr(args, f, None) is not None]
    if args.expr is not None:
        if model_flags:
            parser.error(f"--{model_flags[0]} applies to a named model, not to -c EXPR")
        return load_expression(args.expr)
    path = args.path
    if os.path.isfile(path):
        if model_flags:
            parser.error(f"--{model_flags[0]} applies to a named model, not to a file")
        return load_file(path)
    if os.path.exists(path):
        raise DeplokitError(f"{path} is not a file")
    if path.endswith(".py") or path.startswith((".", os.sep)) or path.count("/") > 1:
        raise DeplokitError(f"no such file: {path}")
    return load_model(path, args)   # ORG/NAME or NAME: a built-in preset


def load_model(name: str, args):
    """A built-in preset by name, its weights on the meta device (compile only)."""
    from .frontend.models import DEFAULT_SEQ, build
    seq = getattr(args, "seq", None)
    return build(name, seq=DEFAULT_SEQ if seq is None else seq, layer=getattr(args, "layer", None))


def compile_program(program, target, tuned=True, cache=None):
    """Compile; with `tuned`, use the best configs the tune cache holds (cli_tune.py). A named
    model traces one layer and compiles identical kernels once."""
    from .compilation import compile as dk_compile, compile_model
    from .frontend.models import ModelProgram

    def build(lookup):
        if isinstance(program, ModelProgram):
            return compile_model(program, target=target, tuned=lookup)
        return dk_compile(program.fn, *program.inputs, target=target, tuned=lookup)

    lookup = cli_tune.TunedLookup(cache) if tuned else None
    try:
        return build(lookup)
    except DeplokitError as e:
        if lookup is None or not lookup.count:
            raise
        # a cached config the passes no longer accept: the defaults, not a failure
        cli_tune._warn([f"not using the tuned configs: {e}"])
        return build(None)


# -- commands -----------------------------------------------------------------------------------

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
    from .trace import format_step

    order = stages()
    upto = set(order[:order.index(stage) + 1])
    out: list[str] = []
    for step in compilation.trace:
        if step.stage not in upto or step.name == "capture":
            continue
        out += format_step(step)
    return "\n".join(out) + "\n"


def write_atomic(path: str, text: str) -> None:
    """Write `text` to `path` via a temporary file in the same folder and os.replace, so the
    file is either the old one or the complete new one, never half-written."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except OSError as e:
        raise DeplokitError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise DeplokitError(f"cannot write {path}: {e.strerror or e}") from None
        raise


def cmd_compile(args, parser) -> int:
    program = load_program(args, parser)
    compilation = compile_program(program, args.target, args.tuned, args.cache)
    stage = "cuda" if args.ir == "sass" else args.ir     # sass: the machine code of the cuda stage
    if args.verbose >= 2:
        sys.stdout.write(format_trace(compilation, stage))
    text = str(compilation.sass()) if args.ir == "sass" else format_ir(compilation, stage, args.verbose)
    if args.output:
        write_atomic(args.output, text)
        print(f"wrote {args.ir} IR to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    from .frontend.models import ModelProgram
    if isinstance(program, ModelProgram):   # stdout stays the IR alone; the inventory goes to stderr
        sys.stdout.flush()
        sys.stderr.write(format_model_inventory(program, compilation))
    return 0


def format_model_inventory(program, compilation) -> str:
    from .inventory import format_inventory
    return f"# {program.source}: kernel inventory\n" + format_inventory(compilation.inventory())


def cmd_run(args, parser) -> int:
    from .errors import ExecutionError
    from .frontend.models import ModelProgram
    program = load_program(args, parser)
    if isinstance(program, ModelProgram) and not program.with_weights:
        raise ExecutionError(f"{program.preset.name} is built with its weights on the meta device: it is "
                             "compile-only (deplokit compile MODEL); run a model file with real weights instead")
    compilation = compile_program(program, args.target, args.tuned, args.cache)
    ran = auto_backend() if args.backend == "auto" else args.backend
    result = compilation.check(backend=ran)
    how = " (auto)" if args.backend == "auto" else ""
    if args.backend == "auto" and ran == "sim":
        how += ": no CUDA device, so the SIMT simulator ran instead of cupy"
    print(f"backend: {ran}{how}")
    print(f"check against torch eager: {result}")
    if result.ok:
        from .cli_bench import bench_after_run
        bench_after_run(args, compilation)
    return 0 if result.ok else 1


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:   # --help, --version and usage errors
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    try:
        if hasattr(args, "handler"):
            return args.handler(args, args.subparser)
        if args.command == "compile":
            return cmd_compile(args, args.subparser)
        if args.command == "bench":
            from .cli_bench import cmd_bench
            return cmd_bench(args)
        return cmd_run(args, args.subparser)
    except SystemExit as e:   # parser.error from load_program
        return e.code if isinstance(e.code, int) else 2
    except DeplokitError as e:
        message = " ".join(str(e).split()) or type(e).__name__
        sys.stdout.flush()
        print(f"deplokit: error: {message}", file=sys.stderr)
        return 2
    except BrokenPipeError:   # `deplokit compile ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
