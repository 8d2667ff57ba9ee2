"""Layers point one way, read statically from the AST of every deplokit module.

The layer order (/work/shared/design/ARCHITECTURE.md, "Layers point one way" and the layout),
lowest first; a module imports only modules of its own layer or below (LAYERS):

    ir, target, errors, display   the IRs and the data they are about
    analysis, trace               what the IR says a program costs; what every pass may read
    passes                        Torch IR -> ... -> CUDA (no runtime, tune, notebook or CLI)
    frontend                      capture
    runtime                       execution (uses only the frontend's public names)
    tune                          search (measures through the runtime)
    pipeline                      the one ordered list of every pass
    compilation, deplokit         the facade
    notebook, cli, demo, bench, fuzz   the faces

Also: no import cycle (function-local imports count too, and `from . import x` names the
package, whose __init__ runs first), a function-local import only for an optional dependency
or for a reason listed here, and no `_private` name imported from another module.
"""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "deplokit"

# Third-party modules that may be missing (extras) or need a device: imported where used.
OPTIONAL = {"cupy", "cupy_backends", "transformers", "matplotlib", "pygments", "ipywidgets", "graphviz",
            "IPython", "nvidia", "tqdm.notebook", "cuda", "gguf"}

# deplokit modules imported inside a function on purpose, with why.
LOCAL_ON_PURPOSE = {
    ("deplokit", "deplokit.compilation"):
        "the package root loads compile/Compilation on first use, so deplokit.ir and deplokit.passes stand alone",
    ("deplokit", "deplokit.generate.lm"):
        "the package root loads load_lm on first use, like compile",
    ("deplokit.cli.generate_cmd", "deplokit.generate.lm"):
        "the command loads torch, transformers and the model only when it runs: its --help stays fast",
    ("deplokit.cli.entry", "deplokit.cli.app"):
        "the commands import torch inside main's guard: Ctrl-C or a broken install while it loads is one line",
    **{("deplokit.compilation", m): "compile loads only the passes; running, timing, disassembling or tuning "
                                    "loads its module on first use"
       for m in ("deplokit.runtime.sim", "deplokit.runtime.cupy_backend", "deplokit.runtime.bench",
                 "deplokit.runtime.sass", "deplokit.tune.tuner", "deplokit.tune.timeline")},
    ("deplokit.bench.suite", "deplokit.bench.programs"):
        "an entry's torch program and inputs load on first use, so `deplokit bench --list` never imports torch",
    ("deplokit.notebook.highlight", "deplokit.notebook.lexers"):
        "lexers.py needs pygments (the notebook extra): without it the IR text is shown plain",
}

# Modules other work in progress is rewriting (issue 18), exempt from the
# cycle and local-import checks until it lands. Every entry must still need it
# (test_pending_entries_are_still_needed): delete an entry once its module is clean.
PENDING: dict[str, str] = {}

# What each layer may not import (prefixes of module names).
FORBIDDEN = {
    "deplokit.ir": ("deplokit.analysis", "deplokit.passes", "deplokit.frontend", "deplokit.runtime", "deplokit.tune",
                    "deplokit.notebook", "deplokit.cli", "deplokit.bench", "deplokit.compilation", "deplokit.pipeline"),
    "deplokit.passes": ("deplokit.frontend", "deplokit.runtime", "deplokit.tune", "deplokit.notebook", "deplokit.cli",
                        "deplokit.bench", "deplokit.compilation"),
    "deplokit.runtime": ("deplokit.compilation", "deplokit.tune", "deplokit.notebook", "deplokit.cli",
                         "deplokit.bench"),
    "deplokit.tune": ("deplokit.notebook", "deplokit.cli", "deplokit.bench"),
    # the schedule reads Loop IR (and the flash plan on it), never fusion's internals
    "deplokit.passes.schedule": ("deplokit.passes.fuse", "deplokit.passes.decompose"),
    # the faces reach the passes through the pipeline
    "deplokit.notebook": ("deplokit.passes.decompose", "deplokit.passes.fuse"),
    # the schedule decides how data moves and stamps it on Tile IR; the lowering reads the stamps
    "deplokit.passes.lower": ("deplokit.passes.stage_geometry", "deplokit.passes.vector_geometry",
                              "deplokit.passes.schedule"),
    # the advanced features' modules (docs/CORE.md) keep the rules of the stage they serve
    **{m: ("deplokit.passes.fuse", "deplokit.passes.decompose")
       for m in ("deplokit.passes.flash.flash_tile", "deplokit.passes.flash.flash_stage",
                 "deplokit.passes.mma.mma_tile", "deplokit.passes.repack")},
    **{m: ("deplokit.passes.stage_geometry", "deplokit.passes.vector_geometry", "deplokit.passes.schedule")
       for m in ("deplokit.passes.mma.mma_lower", "deplokit.passes.tma.proxy_fence")},
    "deplokit.frontend": ("deplokit.passes", "deplokit.runtime", "deplokit.tune", "deplokit.notebook", "deplokit.cli",
                          "deplokit.compilation", "deplokit.pipeline"),
}
LAYERS = (
    ("deplokit.ir", "deplokit.target", "deplokit.errors", "deplokit.display"),
    ("deplokit.analysis", "deplokit.trace"),
    ("deplokit.passes",),
    ("deplokit.frontend",),
    ("deplokit.runtime",),
    ("deplokit.tune",),
    ("deplokit.pipeline",),
    ("deplokit.compilation", "deplokit"),
    ("deplokit.notebook", "deplokit.cli", "deplokit.demo", "deplokit.bench", "deplokit.fuzz", "deplokit.__main__"),
)
ANALYSIS_MAY_IMPORT = ("deplokit.analysis", "deplokit.ir", "deplokit.target", "deplokit.errors", "deplokit.display")


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


MODULES = _modules()


def _targets(module: str, is_package: bool, node) -> list[tuple[str, str | None]]:
    """(module imported, name imported from it or None) for one import statement; `from X
    import y` is module X.y when that is a deplokit module."""
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module
    out = [(f"{source}.{a.name}", None) if f"{source}.{a.name}" in MODULES else (source, a.name)
           for a in node.names]
    if node.level == 1 and not node.module and not is_package:
        out.append((source, None))      # `from . import x`: the package itself is imported first
    return out


def _imports(module: str):
    """Every import of `module`: (target module, name or None, function-local?, line)."""
    path, is_package = MODULES[module]
    found = []

    def visit(node, local):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for t, name in _targets(module, is_package, child):
                    found.append((t, name, local, child.lineno))
            else:
                visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


IMPORTS = {m: _imports(m) for m in MODULES}


def _edges() -> dict[str, set[str]]:
    return {m: {t for t, _, _, _ in IMPORTS[m] if t in MODULES and t != m} for m in MODULES}


def _cycles(edges) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_has_no_cycle():
    assert [c for c in _cycles(_edges()) if not set(c) <= set(PENDING)] == []


def test_every_deplokit_import_names_a_module_that_exists():
    missing = [f"{m}:{line} imports {t}" for m in MODULES for t, _, _, line in IMPORTS[m]
               if t.startswith("deplokit.") and t not in MODULES]
    assert missing == []


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_layers_point_one_way():
    wrong = []
    for m in MODULES:
        for layer, forbidden in FORBIDDEN.items():
            if _within(m, layer):
                wrong += [f"{m}:{line} imports {t}" for t, _, _, line in IMPORTS[m]
                          if any(_within(t, f) for f in forbidden)]
        if _within(m, "deplokit.analysis"):
            wrong += [f"{m}:{line} imports {t}" for t, _, _, line in IMPORTS[m]
                      if t.startswith("deplokit") and not any(_within(t, ok) for ok in ANALYSIS_MAY_IMPORT)]
    assert wrong == []


def _layer(module: str) -> int:
    """The index in LAYERS of the most specific prefix naming `module`."""
    best = max((p for layer in LAYERS for p in layer if _within(module, p)), key=len)
    return next(i for i, layer in enumerate(LAYERS) if best in layer)


def test_every_module_has_a_layer():
    assert [m for m in MODULES if not any(_within(m, p) for layer in LAYERS for p in layer)] == []


def test_imports_follow_the_layer_order():
    """No import from a higher layer, but the notebook where it is asked for (Compilation.stepper())."""
    wrong = [f"{m}:{line} imports {t}" for m in MODULES for t, _, _, line in IMPORTS[m]
             if t in MODULES and _layer(t) > _layer(m) and not _notebook_from_outside(m, t)]
    assert wrong == []


def test_the_layer_finder_picks_the_most_specific_prefix():
    assert _layer("deplokit") == 7 and _layer("deplokit.passes.rows.rows") == 2 and _layer("deplokit.cli.app") == 8


def test_runtime_neither_compiles_nor_reaches_into_frontend_privates():
    wrong = []
    for m in MODULES:
        if not _within(m, "deplokit.runtime"):
            continue
        for t, name, _, line in IMPORTS[m]:
            if t == "deplokit" and name in ("compile", "compile_model", "Compilation"):
                wrong.append(f"{m}:{line} imports deplokit.{name}")
            if t == "deplokit" and name is None:
                wrong.append(f"{m}:{line} imports the deplokit facade")
            if _within(t, "deplokit.frontend") and name and name.startswith("_"):
                wrong.append(f"{m}:{line} imports the private {t}.{name}")
    assert wrong == []


def _optional(target: str) -> bool:
    return any(target == o or target.startswith(o + ".") for o in OPTIONAL)


def _notebook_from_outside(module: str, target: str) -> bool:
    """The notebook layer needs the notebook extra (ipywidgets, pygments ...): the core reaches
    it (Compilation.stepper()) only where it is asked for."""
    return _within(target, "deplokit.notebook") and not _within(module, "deplokit.notebook")


def _hidden(m: str) -> list[str]:
    return [f"{m}:{line} imports {t} inside a function" for t, _, local, line in IMPORTS[m]
            if local and not _optional(t) and not _notebook_from_outside(m, t) and (m, t) not in LOCAL_ON_PURPOSE]


def test_function_local_imports_are_for_optional_dependencies_only():
    hidden = [h for m in MODULES if m not in PENDING for h in _hidden(m)]
    assert hidden == []


def test_the_reasons_for_local_imports_are_still_true():
    """Each LOCAL_ON_PURPOSE entry still names a function-local import (no stale excuses)."""
    present = {(m, t) for m in MODULES for t, _, local, _ in IMPORTS[m] if local}
    assert set(LOCAL_ON_PURPOSE) <= present


def test_pending_entries_are_still_needed():
    """A PENDING module that is now clean (no cycle through it, no hidden import) or gone must
    leave the list, so the exemptions only ever shrink."""
    in_cycles = {m for c in _cycles(_edges()) for m in c}
    stale = [m for m in PENDING if m not in MODULES
             or not (m in in_cycles or _hidden(m))]
    assert stale == []


def _private(name: str | None) -> bool:
    return bool(name) and name.startswith("_") and not name.startswith("__")


def test_no_private_name_is_imported_from_another_module():
    """A name a module keeps to itself (`_x`) stays there: one another module needs is public
    (or lives where it is used)."""
    wrong = [f"{m}:{line} imports {t}.{name}" for m in MODULES for t, name, _, line in IMPORTS[m]
             if t in MODULES and t != m and _private(name)]
    wrong += [f"{m}:{line} imports the module {t}" for m in MODULES for t, name, _, line in IMPORTS[m]
              if t in MODULES and name is None and _private(t.rsplit(".", 1)[-1])]
    assert wrong == []


def test_the_private_import_finder_finds_one():
    assert _private("_Chunk") and not _private("Chunk") and not _private("__version__") and not _private(None)


# package __init__ files that do something on import, with why
INIT_DOES = {
    "deplokit": "the package root: compile and Compilation load on first use (__getattr__)",
    "deplokit.notebook": "importing the notebook layer registers its renderers with deplokit.display",
}


def _init_logic(module: str) -> list[str]:
    """The statements of a package's __init__ beyond a docstring, imports and named values."""
    tree = ast.parse(MODULES[module][0].read_text(encoding="utf-8"))
    plain = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign)
    return [f"{module}:{node.lineno} {type(node).__name__}" for i, node in enumerate(tree.body)
            if not isinstance(node, plain) and not (i == 0 and isinstance(node, ast.Expr)
                                                    and isinstance(node.value, ast.Constant))]


def test_no_logic_in_package_init_files():
    """An __init__ names its package's parts (a docstring, imports, the order of its passes);
    the code lives in the modules."""
    inits = [m for m, (_, is_package) in MODULES.items() if is_package and m not in INIT_DOES]
    assert [line for m in inits for line in _init_logic(m)] == []
    assert all(_init_logic(m) for m in INIT_DOES)        # each exception still needed


def test_ir_and_passes_load_no_runtime_notebook_or_cli_module():
    code = ("import sys, deplokit.ir, deplokit.passes\n"
            "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('deplokit'))))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert "deplokit.passes" in loaded and "deplokit.ir" in loaded
    assert [m for m in loaded if any(_within(m, f"deplokit.{layer}")
                                     for layer in ("runtime", "notebook", "cli", "tune", "bench"))
            or m in ("deplokit.compilation", "deplokit.demo")] == []




def test_every_public_deplokit_error_is_exported():
    """A DeplokitError subclass anywhere in the package is one deplokit exports (errors.py); the
    CLI's usage error never reaches an API caller."""
    import deplokit
    defined = {node.name: m for m in MODULES for node in ast.walk(ast.parse(MODULES[m][0].read_text()))
               if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and not _within(m, "deplokit.cli")
               and any(isinstance(b, ast.Name) and b.id.endswith(("Error", "Missing")) for b in node.bases)}
    assert {name for name, m in defined.items() if m != "deplokit.errors" and name not in deplokit.__all__} == set()
