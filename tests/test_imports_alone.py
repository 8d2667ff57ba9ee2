"""Every module of deplokit's IR and passes imports on its own, first, in a fresh process.

An import cycle hides while some other module happens to load first (the pipeline, a
package __init__); a student who opens one file and imports it meets it. Each module is
imported first in its own process: one clean interpreter loads what the modules share,
then forks once per module. For an IR module that is numpy alone. For a pass it is also
every module of the layers below the passes (ir, analysis, target, trace, errors,
display): those import nothing of the passes (tests/test_layers.py), so no cycle through
a pass can run through them, and preloading them keeps the check to seconds."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BELOW_PASSES = ("deplokit/ir", "deplokit/analysis", "deplokit/target.py", "deplokit/trace.py",
                "deplokit/errors.py", "deplokit/display.py")

CHILD = r"""
import importlib, os, sys, traceback
import numpy  # noqa: F401
split = sys.argv.index("--")
for name in sys.argv[1:split]:       # loaded once, before the forks
    importlib.import_module(name)
failed, running = [], {}
def reap():
    pid, status = os.wait()
    name, read = running.pop(pid)
    with os.fdopen(read) as r:
        why = r.read()
    if status:
        failed.append(f"{name}: {why}")
for name in sys.argv[split + 1:]:
    if len(running) >= max(2, os.cpu_count() or 1):
        reap()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(name)
            code = 0
        except BaseException:
            os.write(write, traceback.format_exc().strip().splitlines()[-1].encode())
            code = 1
        os._exit(code)
    os.close(write)
    running[pid] = (name, read)
while running:
    reap()
print("\n".join(sorted(failed)))
"""


def modules(*roots: str) -> list[str]:
    out = []
    for root in roots:
        paths = [ROOT / root] if root.endswith(".py") else sorted((ROOT / root).rglob("*.py"))
        for path in paths:
            parts = path.relative_to(ROOT).with_suffix("").parts
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def first_imports(preload: list[str], names: list[str]) -> str:
    """The modules of `names` that fail when imported first (after `preload`), with why."""
    out = subprocess.run([sys.executable, "-c", CHILD, *preload, "--", *names], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_module_lists_are_read_from_the_tree():
    passes = modules("deplokit/passes")
    assert "deplokit.passes.repack.repack" in passes and "deplokit.passes.schedule" in passes
    assert len(passes) == len(set(passes)) > 100
    assert "deplokit.ir.kernel_ir" in modules(*BELOW_PASSES) and not set(passes) & set(modules(*BELOW_PASSES))


def test_every_ir_module_imports_first_in_a_fresh_process():
    assert first_imports([], modules("deplokit/ir")) == ""


def test_every_pass_module_imports_first_in_a_fresh_process():
    assert first_imports(modules(*BELOW_PASSES), modules("deplokit/passes")) == ""


def test_a_module_that_cannot_be_imported_first_is_reported():
    got = first_imports([], ["deplokit.ir.types", "deplokit.no_such_module"])
    assert got.startswith("deplokit.no_such_module: ModuleNotFoundError") and "ir.types" not in got
