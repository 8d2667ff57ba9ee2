"""The parser of every command and the one dispatch: each command module adds its
subparser with a handler (parser.add_command), and `dispatch` calls the handler of the
command parsed."""
from __future__ import annotations

from .. import __version__
from . import bench_cmd, compile_cmd, ops_cmd, preflight_cmd, run_cmd, tune_cmd
from .parser import DEBUG_HELP, TRUST_NOTE, Parser, stages

COMMANDS = (compile_cmd, run_cmd, bench_cmd, tune_cmd, preflight_cmd, ops_cmd)


def build_parser() -> Parser:
    parser = Parser(
        prog="deplokit",
        description="deplokit: a teaching compiler that lowers PyTorch programs through inspectable IRs "
                    f"({' -> '.join(stages())}).",
        epilog="Note: " + TRUST_NOTE,
    )
    parser.add_argument("--version", action="version", version=f"deplokit {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def dispatch(args) -> int:
    return args.handler(args)
