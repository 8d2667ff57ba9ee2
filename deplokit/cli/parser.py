"""The argument parser every command shares: usage errors are one line, and the program
source (-c EXPR | PATH) with its target and tuned-cache options."""
from __future__ import annotations

import argparse

from ..errors import DeplokitError
from ..target import TARGETS

TRUST_NOTE = ("-c evaluates Python code, with the same trust as running a script: "
              "only pass code you would run yourself.")

EXPR_HELP = ("Python code to compile, with torch, nn (torch.nn) and F (torch.nn.functional) in scope, "
             "e.g. 'nn.RMSNorm(2048)(torch.randn(1,32,2048))'. Statements may precede the final "
             "expression, separated by ';' or newlines. Tensor-factory calls (torch.randn, zeros, "
             "arange, ...) become the program's inputs. " + TRUST_NOTE)

PATH_HELP = ("a .py file defining `model` (nn.Module or function) and `inputs` (tuple of tensors), "
             "or a built-in model preset (compile only): TinyLlama/TinyLlama-1.1B-Chat-v1.0, Qwen/Qwen2.5-7B")

CACHE_HELP = "tuning cache (default: $DEPLOKIT_CACHE_DIR/tune.db or ~/.cache/deplokit/tune.db)"
DEBUG_HELP = "on an error, also print the Python traceback (for reporting a bug in deplokit)"


class UsageError(DeplokitError):
    """A command line argparse (or a command) rejects; `prog` names the command."""

    def __init__(self, prog: str, message: str):
        super().__init__(message)
        self.prog = prog


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is a UsageError: main prints it as one line (what, where,
    what is supported, and where the full usage is) instead of a usage block."""

    def error(self, message):
        raise UsageError(self.prog, f"{message} (see {self.prog} --help)")


def usage_error(args, message: str) -> UsageError:
    """A UsageError for the command `args` were parsed for."""
    return UsageError(args.subparser.prog, f"{message} (see {args.subparser.prog} --help)")


def stages() -> list[str]:
    """The stages a Compilation builds, in order: torch, tensor, loop, tile, kernel, cuda."""
    return list(STAGES)


# pipeline.STAGES spelled out: importing the pipeline loads every pass (tests/test_cli.py
# checks that the two agree).
STAGES = ("torch", "tensor", "loop", "tile", "kernel", "cuda")


def count(least: int):
    """An argparse type: a whole number >= least."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = least - 1
        if n < least:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {least}, got {text!r}")
        return n
    return parse


def add_command(sub, name: str, handler, **kwargs) -> Parser:
    """A subcommand parser whose parsed args dispatch to `handler`: "MODULE:FUNCTION" of a
    module in deplokit/cli, imported only when the command runs (app.dispatch), or a function
    of the parsed args that gives one (a light mode of a heavy command)."""
    p = sub.add_parser(name, **kwargs)
    p.set_defaults(handler=handler, subparser=p)
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return p


def add_source(p, tuned_cache: bool = True) -> None:
    """-c EXPR | PATH, --target, and (for compile and run) the tuned-config cache."""
    p.add_argument("-c", dest="expr", metavar="EXPR", help=EXPR_HELP)
    p.add_argument("path", nargs="?", metavar="PATH", help=PATH_HELP)
    p.add_argument("--target", choices=list(TARGETS), default="sm_90",
                   help="GPU architecture to compile for (default: %(default)s)")
    if tuned_cache:
        p.add_argument("--cache", metavar="PATH", help="read tuned configs from this " + CACHE_HELP)
        p.add_argument("--no-tuned", dest="tuned", action="store_false",
                       help="ignore the tuned configs in the cache: the passes' default heuristics")
