"""The parser of every command and the one dispatch: each command module adds its
subparser with a handler (parser.add_command), and `dispatch` calls the handler of the
command parsed."""
from __future__ import annotations

from .. import __version__
from .bench_cmd import add_parser as add_bench
from .compile_cmd import add_parser as add_compile
from .ops_cmd import add_parser as add_ops
from .parser import DEBUG_HELP, TRUST_NOTE, Parser, stages
from .preflight_cmd import add_parser as add_preflight
from .run_cmd import add_parser as add_run
from .tune_cmd import add_parser as add_tune

COMMANDS = (add_compile, add_run, add_bench, add_tune, add_preflight, add_ops)   # each adds its command's subparser


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
    for add in COMMANDS:
        add(sub)
    return parser


def dispatch(args) -> int:
    return args.handler(args)
