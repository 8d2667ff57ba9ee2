"""Run one fuzz case through every backend and against torch eager; name what went wrong.

A case compiles its `-c` text for its target and knob config, then runs on the Tensor-IR and
Loop-IR interpreters and on the SIMT simulator with every buffer the program writes filled
with NaN first (an element a kernel forgets to write shows up), compares each with eager,
and compiles the CUDA with NVRTC (every case, when available, in a worker process that a
compiler crash cannot take down) or nvcc (a sample). A clean
refusal (a DeplokitError naming what is unsupported) is not a failure; a traceback-class
exception, a mismatch, a compiler rejection or a timeout is. Each failure gets a class (the
stage and the message with names and numbers masked), so that a long run reports each
distinct defect once, with the smallest case that shows it.
"""
from __future__ import annotations

import functools
import json
import re
import signal
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

import deplokit

from ..compilation import default_atol
from ..errors import DeplokitError
from ..frontend.expression import load_expression
from ..runtime.nvcc import nvcc_available
from ..runtime.nvrtc import nvrtc_available
from ..runtime.sim import simulate_program
from .isolated_nvrtc import WORKER
from .programs import Case
from .reference import reference

BACKENDS = ("tensor", "loop", "sim")
UNKNOWN_SPREAD = 30  # slack (x atol) for an output whose rounding spread is unknown


class CaseTimeout(BaseException):
    pass


@dataclass
class Outcome:
    case: Case
    status: str                 # ok | refused | fail
    stage: str = ""             # compile | tensor | loop | sim | nvrtc | nvcc | eager | timeout
    message: str = ""
    seconds: float = 0.0

    @property
    def failure_class(self) -> str:
        return f"{self.stage}: {mask(self.message)}"


def mask(message: str) -> str:
    """The message with what varies between instances of one defect masked: quoted names,
    numbers, shapes, generated identifiers."""
    text = message.strip().splitlines()[0] if message.strip() else ""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'_'", text)
    text = re.sub(r"\b[a-zA-Z]*[_\d]\w*\b", "_", text)
    text = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", text)
    text = re.sub(r"\([N, ]*\)", "(N)", text)
    return text[:160]


# A case's limit counts the CPU time this process spends (NVRTC and the simulator run in
# it), so that a busy machine does not turn a slow case into a timeout; a wall-clock limit
# this many times longer still ends a case that waits (nvcc has its own timeout).
WALL_FACTOR = 10


@contextmanager
def time_limit(seconds: float):
    """A block bounded by `seconds` of CPU time and WALL_FACTOR x `seconds` of wall time
    (main thread only; elsewhere unbounded)."""
    if seconds <= 0 or not hasattr(signal, "SIGPROF"):
        yield
        return

    def fire(signum, frame):
        if signum == signal.SIGPROF:
            raise CaseTimeout(f"case ran over {seconds:g} s of CPU time")
        raise CaseTimeout(f"case waited over {seconds * WALL_FACTOR:g} s")
    try:
        old = {sig: signal.signal(sig, fire) for sig in (signal.SIGPROF, signal.SIGALRM)}
    except ValueError:           # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, seconds * WALL_FACTOR)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in old.items():
            signal.signal(sig, handler)


def poisoned_sim(c, inputs):
    """The simulator's outputs with every written buffer NaN before the first kernel."""
    env = dict(c.values)
    env.update({n: t.detach().numpy() for n, t in zip(c.input_names, inputs)})
    for prog in (c.loop_ir, c.kernel_ir):
        for b in prog.written:
            if b.type.dtype == "float32":
                env[b.name] = np.full(b.type.shape, np.nan, dtype=np.float32)
    outs = simulate_program(c.kernel_ir, env, launches=c.launches, whole=c.loop_ir if c.launches else None,
                            max_block_threads=1024)
    return c._wrap(outs)


def mismatch(e32, spread, got, rtol: float, atol: float) -> str:
    """'' when `got` matches eager: the same NaN/inf places, finite values within
    atol + rtol |e| plus 10 x the output's rounding spread (see reference), or plus
    UNKNOWN_SPREAD x atol where float64 could not run the program."""
    got = torch.utils._pytree.tree_leaves(got)
    if len(got) != len(e32):
        return f"{len(got)} outputs, eager has {len(e32)}"
    for i, (e, w, g) in enumerate(zip(e32, spread, got)):
        if tuple(e.shape) != tuple(g.shape) or e.dtype != g.dtype:
            return f"output {i}: {tuple(g.shape)} {g.dtype}, eager {tuple(e.shape)} {e.dtype}"
        if not e.dtype.is_floating_point:
            if not torch.equal(e, g):
                return f"output {i}: integer values differ"
            continue
        e, g = e.double(), g.double()
        if not torch.equal(torch.isnan(e), torch.isnan(g)):
            return f"output {i}: NaN in {int(torch.isnan(g).sum())} places, eager {int(torch.isnan(e).sum())}"
        inf = torch.isinf(e)
        if not torch.equal(inf, torch.isinf(g)) or not torch.equal(e[inf], g[inf]):
            return f"output {i}: infinities differ"
        slack = 10 * w if w is not None else UNKNOWN_SPREAD * atol
        fin = torch.isfinite(e)
        err = (g - e).abs()[fin]
        bad = err > atol + rtol * e.abs()[fin] + slack
        if bool(bad.any()):
            return (f"output {i}: {int(bad.sum())} of {int(fin.sum())} values off, max abs error "
                    f"{float(err.max()):.3g} (rtol {rtol:g}, atol {atol:.3g})")
    return ""


def _is_defect(e: Exception) -> bool:
    """A DeplokitError that reports the compiler's own mistake (an IR verifier's invariant),
    not an input it does not support."""
    return any(c.__name__ == "IRInvariantError" for c in type(e).__mro__)


def compile_case(case: Case):
    program = load_expression(case.text)
    c = deplokit.compile(program.fn, *program.inputs, target=case.target, config=dict(case.config))
    return c, program


@functools.cache
def _warm_up() -> None:
    """One small compilation and run outside any time limit: the modules torch.export and
    deplokit import lazily (sympy among them) load here, since a limit that fired inside a
    first import would leave the module half made and every later case refused."""
    c, program = compile_case(Case(0, 0, "x0 = torch.randn(2, 8)\ntorch.softmax(x0, -1) @ x0.t()", ("softmax",)))
    c.run(*program.inputs, backend="loop")


def run_case(case: Case, timeout: float = 60.0, nvcc: bool = False, rtol: float = 1e-5,
             twice: bool = False) -> Outcome:
    """The case's outcome. With `twice`, the simulator runs a second time and must give the
    same bits (no order-dependent sums); the CUDA text is compiled twice always."""
    if timeout > 0:
        _warm_up()
    start = time.perf_counter()
    stage = "compile"
    try:
        with time_limit(timeout), warnings.catch_warnings():
            warnings.simplefilter("ignore")      # eager's own (var of one element): not findings
            try:
                c, program = compile_case(case)
            except DeplokitError as e:
                if _is_defect(e):          # the compiler caught itself: a finding, not a refusal
                    raise
                return Outcome(case, "refused", "compile", str(e), time.perf_counter() - start)
            stage = "determinism"
            again, _ = compile_case(case)
            if str(again.cuda) != str(c.cuda) or str(again.loop_ir) != str(c.loop_ir):
                return Outcome(case, "fail", stage, "two compilations print different IR",
                               time.perf_counter() - start)
            # a half case whose inputs all stayed float32 (mixed: one input) is a float32 case
            halves = (torch.bfloat16, torch.float16)
            if case.dtype != "float32" and any(isinstance(t, torch.Tensor) and t.dtype in halves
                                               for t in program.inputs):
                stage = "eager"
                try:            # a module of float32 weights on a half input: eager refuses it too
                    with torch.no_grad():
                        program.fn(*program.inputs)
                except RuntimeError as e:
                    return Outcome(case, "refused", stage, f"eager rejects it: {e}", time.perf_counter() - start)
                # half: the project's own check (eager in half and the float32 run, tolerances
                # from the format's unit roundoff and the longest reduction: precision.py)
                for backend in BACKENDS:
                    stage = backend
                    r = c.check(*program.inputs, backend=backend)
                    bad = ("eager" if not r.ok else "float32 run" if r.float32 is not None
                           and not r.float32.ok else "")
                    if bad and not _no_closer(c, program, backend):
                        which = r if not r.ok else r.float32
                        return Outcome(case, "fail", backend, f"mismatch vs {bad}: " + str(which).splitlines()[0],
                                       time.perf_counter() - start)
                stage = "nvrtc"
                if nvrtc_available():
                    WORKER.compile(str(c.cuda), c.cuda.build_arch(case.target))
                return Outcome(case, "ok", seconds=time.perf_counter() - start)
            stage = "eager"
            e32, spread = reference(program.fn, program.inputs)
            # Within a float32 ulp or two of eager (rtol 1e-5, atol 1e-5 x the largest |output|)
            # plus 10 x the spread float32 rounding alone causes (reference.py): what a sum in
            # another order or an ill-conditioned chain moves; a lost value, a bad index or a
            # race is far outside. The lower backends may match the Tensor-IR interpreter instead.
            atol = default_atol(e32)
            own = None
            for backend in BACKENDS:
                stage = backend
                got = poisoned_sim(c, program.inputs) if backend == "sim" else c.run(*program.inputs, backend=backend)
                wrong = mismatch(e32, spread, got, rtol, atol)
                if own is None:
                    own = torch.utils._pytree.tree_leaves(got)
                elif wrong:
                    wrong = mismatch(own, spread, got, rtol, atol)
                if wrong:
                    return Outcome(case, "fail", backend, f"mismatch: {wrong}", time.perf_counter() - start)
            if twice:
                stage = "determinism"
                first = torch.utils._pytree.tree_leaves(got)
                second = torch.utils._pytree.tree_leaves(poisoned_sim(c, program.inputs))
                if not all(torch.equal(a.view(-1).view(torch.int8) if a.dtype.is_floating_point else a,
                                       b.view(-1).view(torch.int8) if b.dtype.is_floating_point else b)
                           for a, b in zip(first, second)):
                    return Outcome(case, "fail", stage, "two simulator runs differ in their bits",
                                   time.perf_counter() - start)
            stage = "nvrtc"
            if nvrtc_available():
                WORKER.compile(str(c.cuda), c.cuda.build_arch(case.target))
            if nvcc:
                stage = "nvcc"
                if nvcc_available():
                    c.nvcc()
    except CaseTimeout as e:
        return Outcome(case, "fail", "timeout", f"{e} (in {stage})", time.perf_counter() - start)
    except Exception as e:  # noqa: BLE001 -- every other exception is a finding
        msg = f"{type(e).__name__}: {e}"
        if isinstance(e, DeplokitError) and stage not in ("compile", "nvrtc", "nvcc"):
            msg = f"{type(e).__name__} after compiling: {e}"
        return Outcome(case, "fail", stage, msg, time.perf_counter() - start)
    return Outcome(case, "ok", seconds=time.perf_counter() - start)


def _no_closer(c, program, backend: str) -> bool:
    """Whether eager in half is at least as far from the float32 run of the program as deplokit
    (largest distance over the outputs): then a failed comparison is eager's own rounding, not
    deplokit wrong. Eager rounds every op, deplokit where it stores (eager's bf16 layer_norm of
    one element is 2.5e-5, the exact 0 is deplokit's), and an ill-conditioned program moves
    both as far (cos of a bf16 matmul's value near 360 by a whole radian-sized step)."""
    reference = torch.utils._pytree.tree_leaves(c.eager_float32(*program.inputs))
    with torch.no_grad():
        eager = torch.utils._pytree.tree_leaves(program.fn(*program.inputs))
    ours = torch.utils._pytree.tree_leaves(c.run(*program.inputs, backend=backend))

    def distance(xs) -> float:
        return max((float((x.double() - ref.double()).abs().nan_to_num(0.0).max()) if x.numel() else 0.0)
                   for x, ref in zip(xs, reference))
    return distance(ours) <= distance(eager)


def reproducer(case: Case, stage: str = "") -> str:
    """One command line that replays the case (from the repository root)."""
    text = case.one_line().replace("'", '"')
    if not case.config and case.dtype == "float32" and stage in ("compile", "tensor", "loop"):
        backend = "" if stage == "compile" else f" --backend {stage}"
        return f".venv/bin/deplokit run --no-tuned --target {case.target}{backend} -c '{text}'"
    dtype = f" --dtype {case.dtype}" if case.dtype != "float32" else ""
    return (f".venv/bin/python -m deplokit.fuzz --replay --target {case.target}{dtype} "
            f"--config '{_config_text(case.config)}' -c '{text}'")


def _config_text(config: dict) -> str:
    return json.dumps(config, sort_keys=True)
