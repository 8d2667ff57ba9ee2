"""What every command does first: load the program (-c EXPR, a .py file or a model preset),
compile it with the tuned configs the cache holds; and the output helpers they share."""
from __future__ import annotations

import os
import sys
import tempfile

from ..compilation import compile as dk_compile
from ..compilation import compile_model
from ..errors import CacheError, DeplokitError
from ..frontend.expression import load_expression
from ..frontend.models import DEFAULT_SEQ, ModelProgram, build
from ..frontend.pyfile import load_file
from ..tune.cache import TuneCache
from ..tune.tuner import tuned_choices, tuned_config
from .parser import usage_error


def load_program(args):
    if args.expr is not None and args.path is not None:
        raise usage_error(args, "give either -c EXPR or PATH, not both")
    if args.expr is None and args.path is None:
        raise usage_error(args, "give a program: -c EXPR or PATH (a .py file)")
    model_flags = [f for f in ("seq", "layer", "dtype") if getattr(args, f, None) is not None]
    if args.expr is not None:
        if model_flags:
            raise usage_error(args, f"--{model_flags[0]} applies to a named model, not to -c EXPR")
        return load_expression(args.expr)
    path = args.path
    if os.path.isfile(path):
        if model_flags:
            raise usage_error(args, f"--{model_flags[0]} applies to a named model, not to a file")
        return load_file(path)
    if os.path.exists(path):
        raise DeplokitError(f"{path} is not a file")
    if path.endswith(".py") or path.startswith((".", os.sep)) or path.count("/") > 1:
        raise DeplokitError(f"no such file: {path}")
    return load_model(path, args)   # ORG/NAME or NAME: a built-in preset


def load_model(name: str, args):
    """A built-in preset by name, its weights on the meta device (compile only)."""
    seq = getattr(args, "seq", None)
    return build(name, seq=DEFAULT_SEQ if seq is None else seq, layer=getattr(args, "layer", None),
                 dtype=getattr(args, "dtype", None) or "float32")


def compile_program(program, target, tuned=True, cache=None, precision: str = "float32"):
    """Compile; with `tuned`, use the best configs the tune cache holds (looked up inside the
    one lowering). A named model traces one layer and compiles identical kernels once."""
    def build(lookup):
        if isinstance(program, ModelProgram):
            return compile_model(program, target=target, tuned=lookup, precision=precision)
        return dk_compile(program.fn, *program.inputs, target=target, tuned=lookup, precision=precision)

    lookup = TunedLookup(cache) if tuned else None
    try:
        return build(lookup)
    except DeplokitError as e:
        if lookup is None or not lookup.count:
            raise
        # a cached config the passes no longer accept: the defaults, not a failure
        warn([f"not using the tuned configs: {e}"])
        return build(None)


def warn(notes) -> None:
    for note in notes:
        print(f"deplokit: warning: {' '.join(note.split())}", file=sys.stderr)


class TunedLookup:
    """`deplokit.compile(..., tuned=TunedLookup(path))`: the best cached configs of the
    program's kernels, looked up inside the one lowering (the Loop IR is known only there);
    one line on stderr says how many kernels use one. A broken cache is a warning, never a
    failure: no tuned configs then."""

    def __init__(self, cache_path=None):
        self.cache_path = cache_path
        self.count = 0

    def _read(self, query):
        """(query(store)'s answer, the cache's path), or (None, "") and a warning when the cache
        cannot be read; the cache's notes are warned."""
        try:
            store = TuneCache(self.cache_path, create=False)
        except CacheError as e:
            warn([f"not using tuned configs: {e}"])
            return None, ""
        try:
            answer = query(store)
        except CacheError as e:
            warn([f"not using tuned configs: {e}"])
            return None, ""
        finally:
            store.close()
        warn(store.notes)
        return answer, store.path

    def choices(self, program, target) -> dict:
        """The program-level knobs (fusion, splits) the tuner chose for `program`; a line says which."""
        config, path = self._read(lambda store: tuned_choices(program, target, store))
        if config:
            print(f"using the tuned program-level choice from {path}: "
                  + ", ".join(f"{k}={v}" for k, v in config.items()), file=sys.stderr)
        return config or {}

    def __call__(self, program, target) -> dict:
        found, path = self._read(lambda store: tuned_config(program, target, store)[:2])
        if found is None:
            return {}
        config, self.count = found
        if self.count:
            print(f"using tuned config from {path} for {self.count} kernel{'s' if self.count != 1 else ''}",
                  file=sys.stderr)
        return config


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
