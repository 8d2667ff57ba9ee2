"""The `deplokit` command line.

    deplokit compile -c EXPR | PATH [--ir STAGE] [--target T] [-v|-vv] [-o FILE]   (compile_cmd.py)
    deplokit compile MODEL [--seq N] [--layer N] [--ir STAGE] ...  (a preset, e.g. Qwen/Qwen2.5-7B)
    deplokit run     -c EXPR | PATH [--backend B] [--target T] [--bench] [--profile]   (run_cmd.py)
    deplokit generate MODEL --prompt TEXT [--chat] [--max-new-tokens N] [--backend B] [--check]  (generate_cmd.py)
    deplokit bench   --suite llm [--list] [--filter S] [--compile-only]                (bench_cmd.py)
    deplokit tune    -c EXPR | PATH [-v] [--budget N] [--objective model|gpu] [--cache PATH]  (tune_cmd.py)
    deplokit preflight   (can this machine run the CUDA kernels?)                   (preflight_cmd.py)

compile and run use the tuned configs the tune cache holds for the program's kernels.
app.py builds the parser and dispatches; parser.py and program.py hold what commands share.

Every failure is one line on stderr and no traceback: a usage error or a DeplokitError is
`deplokit[ COMMAND]: error: <message>` with exit status 2; Ctrl-C is `deplokit: interrupted`
with 130; anything else is a bug in deplokit, reported as `deplokit: internal error: ...`
with status 70 and a hint to re-run with --debug (or DEPLOKIT_DEBUG=1), which adds the traceback.
"""
from __future__ import annotations

import os
import signal
import sys
import traceback

from ..errors import DeplokitError

EXIT_USAGE, EXIT_SOFTWARE, EXIT_INTERRUPTED = 2, 70, 130


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or os.environ.get("DEPLOKIT_DEBUG", "") not in ("", "0")
    try:
        # Loaded here, inside the guard, on purpose: the commands import torch (seconds), and
        # Ctrl-C or a broken install while that loads must be one line too.
        from .app import build_parser, dispatch
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:   # --help and --version
            return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_USAGE)
        return dispatch(args)
    except DeplokitError as e:
        return _fail(f"{getattr(e, 'prog', 'deplokit')}: error: {_one_line(e)}", debug, EXIT_USAGE)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # the one line is said: a second Ctrl-C changes nothing
        return _fail("deplokit: interrupted", debug, EXIT_INTERRUPTED)
    except BrokenPipeError:   # `deplokit compile ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as e:   # a bug in deplokit: still one line, the traceback on request
        hint = "" if debug else "; re-run with --debug for the traceback"
        return _fail(f"deplokit: internal error: {type(e).__name__}: {_one_line(e)} (a bug in deplokit{hint})",
                     debug, EXIT_SOFTWARE)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _fail(line: str, debug: bool, code: int) -> int:
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        pass
    if debug:
        traceback.print_exc()
    print(line, file=sys.stderr)
    return code
