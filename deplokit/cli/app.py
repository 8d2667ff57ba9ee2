"""The parser of every command and the one dispatch: commands.py declares each command's
arguments and names its handler ("MODULE:FUNCTION"); `dispatch` imports that one module
when the command runs, so --help and usage errors never load torch or the compiler."""
from __future__ import annotations

import importlib

from .. import __version__
from .commands import COMMANDS
from .parser import DEBUG_HELP, STAGES, TRUST_NOTE, Parser


def build_parser() -> Parser:
    parser = Parser(
        prog="deplokit",
        description="deplokit: a teaching compiler that lowers PyTorch programs through inspectable IRs "
                    f"({' -> '.join(STAGES)}).",
        epilog="Note: " + TRUST_NOTE,
    )
    parser.add_argument("--version", action="version", version=f"deplokit {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def handler(spec: str):
    """The function "MODULE:FUNCTION" names, MODULE a module of deplokit/cli."""
    module, function = spec.split(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)


def dispatch(args) -> int:
    spec = args.handler(args) if callable(args.handler) else args.handler
    return handler(spec)(args)
