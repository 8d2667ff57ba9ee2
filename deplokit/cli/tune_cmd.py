"""`deplokit tune`: search the scheduling knobs of a program's kernels; and the tuned configs
that `deplokit compile` and `run` pick up from the cache (program.with_tuned_config).

    deplokit tune -c EXPR | PATH [-v] [--budget N] [--objective model|gpu] [--cache PATH]
                  [--search mcts|random] [--seed S] [--patience P] [--calibrate]

A progress bar (trial, best so far) on stderr while it runs, then a table of each kernel's
best config: its default and best cost, and the knobs that differ from the default (-v: every
knob, and a line per trial). Ctrl-C stops it; the finished trials are in the cache and the
next run resumes from them.
"""
from __future__ import annotations

import sys

from tqdm import tqdm

from ..errors import DeplokitError
from ..runtime.device import require_gpu
from ..tune.cache import TuneCache
from ..tune.calibrate import fit_constants, log_error, measure_samples
from ..tune.constants import save_constants
from ..tune.cost_model import CostConstants
from ..tune.result import PROGRAM
from ..tune.space import kernel_spaces
from .program import compile_program, load_program, warn


def _progress(total: int, verbose: int):
    """(listener, close): a tqdm bar on stderr; with -v also a line per trial naming the knobs
    it tried (those that differ from its kernel's trial 0, the config compiled with). The
    program-level options priced first are trials beyond the kernels' budget: each adds one
    to the bar's total, so the bar ends where the trials do."""
    bar = tqdm(total=total, unit="trial", file=sys.stderr, dynamic_ncols=True, leave=False)
    starts: dict[str, dict] = {}

    def listener(trial):
        if trial.kernel == PROGRAM:
            bar.total += 1
        best = "-" if trial.best_us is None else f"{trial.best_us:.2f} µs"
        bar.set_postfix_str(f"{trial.kernel} best {best}", refresh=False)
        bar.update(1)
        if verbose:
            cost = f"{trial.cost_us:.2f} µs" if trial.ok else f"failed: {trial.error}"
            start = starts.setdefault(trial.kernel, dict(trial.config))
            tried = ", ".join(f"{k}={v}" for k, v in trial.config if start.get(k) != v)
            what = "the start (the config compiled with)" if trial.default else (tried or "the start's kernel")
            bar.write(f"trial {trial.index}: {trial.kernel}: {cost}{' (cached)' if trial.cached else ''}: {what}",
                      file=sys.stderr)

    def close():
        bar.total = bar.n          # a search cut short (patience, a small space) ends the bar here
        bar.close()
    return listener, close


def format_table(result, verbose: int = 0) -> str:
    """Each tuned kernel: trials, the default's and the best cost, the speedup, and the knobs
    in effect in its best config (those its kernel depends on, KernelSpace.in_effect) that
    differ from the default; -v: every knob in effect."""
    unit = "µs (model)" if result.objective == "model" else "µs"
    rows = [("kernel", "trials", f"default {unit}", f"best {unit}", "speedup", "knobs")]
    for kernel, names in result.kernels:
        trials = [t for t in result.history if t.kernel == kernel]
        best, default = result.best_for(kernel), result.default_for(kernel)
        dflt = dict(default.config) if default else {}
        effect = result.in_effect_for(kernel)
        knobs = [(k, v) for k, v in (effect if effect is not None else best.config if best else ())
                 if verbose or dflt.get(k) != v]
        text = ", ".join(f"{k}={v}" for k, v in knobs) or "(the default)"
        label = kernel if len(names) == 1 else f"{kernel} (x{len(names)})"
        d = f"{default.cost_us:.2f}" if default and default.ok else "failed"
        b = f"{best.cost_us:.2f}" if best else "-"
        speed = f"{default.cost_us / best.cost_us:.2f}x" if best and default and default.ok else "-"
        rows.append((label, str(len(trials)), d, b, speed, text))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    table = "\n".join("  ".join(r[i].ljust(widths[i]) for i in range(5)) + "  " + r[5] for r in rows) + "\n"
    return table + _program_lines(result, unit)


def _program_lines(result, unit: str) -> str:
    """One line per program-level option the tuner compared (its knobs that differ from the
    defaults' option, its cost), the chosen one marked."""
    if not result.programs:
        return ""
    base = dict(result.programs[0].config)
    lines = []
    for t in result.programs:
        knobs = ", ".join(f"{k}={v}" for k, v in t.config if base.get(k) != v) or "(the defaults)"
        cost = f"{t.cost_us:.2f} {unit}" if t.ok else f"failed: {t.error}"
        mark = "  <- chosen" if t.config == result.program_config else ""
        lines.append(f"program {knobs}: {cost}{mark}")
    return "\n".join(lines) + "\n"


def cmd_tune(args) -> int:
    if args.budget < 1:
        raise DeplokitError(f"--budget must be at least 1, got {args.budget}")
    program = load_program(args)
    compilation = compile_program(program, args.target, tuned=False)
    store = TuneCache(args.cache)
    warn(store.notes)
    try:
        if args.calibrate:
            return _calibrate(compilation, store, args)
        if args.objective == "gpu":          # before the progress bar: the error is one clean line
            require_gpu("the gpu objective")
        kernels = len(kernel_spaces(compilation.loop_ir, compilation.target))
        listener, close = _progress(args.budget * kernels, args.verbose)
        try:
            result = compilation.tune(budget=args.budget, objective=args.objective, listener=listener, cache=store,
                                      search=args.search, seed=args.seed, patience=args.patience)
        except KeyboardInterrupt:
            close()
            print(f"interrupted: every finished trial is kept in {store.path}; run again to resume",
                  file=sys.stderr)
            return 130
        finally:
            close()
        sys.stdout.write(format_table(result, args.verbose))
        new = sum(1 for t in result.history if not t.cached)
        print(f"{len(result.history)} trials ({new} new, {len(result.history) - new} from the cache) in {store.path}; "
              f"all told {store.recorded} run and {store.read_back} read back from the cache (the program-level "
              "options and the kernel defaults that priced them included); "
              "deplokit compile and run use the best configs", file=sys.stderr)
        return 0
    finally:
        store.close()


def _calibrate(compilation, store, args) -> int:
    samples = measure_samples(compilation, per_kernel=max(2, min(args.budget, 32)), seed=args.seed)
    if not samples:
        raise DeplokitError("calibration measured no schedule (every one failed)")
    before = log_error(samples, compilation.target, CostConstants())
    constants, after = fit_constants(samples, compilation.target)
    save_constants(store, compilation.target, constants)
    print(f"calibrated on {len(samples)} timed schedules: mean squared log error {before:.3f} -> {after:.3f}")
    for name, value in constants.as_dict().items():
        print(f"  {name} = {value:.4g}")
    print(f"stored in {store.path}; --objective model uses them for {compilation.target.name}")
    return 0
