"""`deplokit.compile` and the Compilation it returns: every IR, the trace, and execution."""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import FrozenInstanceError, dataclass

import numpy as np
import torch

from .analysis.inventory import inventory
from .display import Displayable
from .errors import ExecutionError
from .frontend import hf
from .frontend.capture import capture, to_numpy
from .ir.tensor_ir import Reduction
from .ir.types import HALF_DTYPES
from .passes.decompose.program import half_decision_operands
from .passes.flash.flash_mma_lower import is_flash_mma
from .passes.lower.cuda import render_cuda
from .passes.lower.materialize import lower_tiles
from .passes.verify import verify
from .pipeline import STAGES, lower
from .precision import DEFAULT_PRECISION, check_precision, exact_tolerance, rounding_tolerance
from .runtime.device import gpu_available
from .runtime.loop_interp import run_loop_ir
from .runtime.nvcc import compile_cuda
from .runtime.tensor_interp import run_tensor_ir
from .target import MAX_BLOCK_THREADS, get_target
from .trace import Context

# Backends Compilation.run accepts: the numpy interpreters of Tensor IR and Loop IR, the
# SIMT simulator running the Kernel IR, the CUDA kernels on a GPU through CuPy; "auto" picks
# cupy when a CUDA device is present, else the simulator.
BACKENDS = ("tensor", "loop", "sim", "cupy", "auto")

# The simulator, CuPy, the benchmark, the disassembler and the tuner load when first used
# (each method imports its own), so compiling and printing an IR loads only the passes.


def resolve_backend(backend: str) -> str:
    """The backend that runs for `backend`: "auto" is cupy with a CUDA device, else sim."""
    if backend not in BACKENDS:
        raise ExecutionError(f"unknown backend {backend!r}; supported: {', '.join(BACKENDS)}")
    if backend != "auto":
        return backend
    return "cupy" if gpu_available() else "sim"


@dataclass(frozen=True)
class CheckResult(Displayable):
    backend: str
    max_abs_error: float
    max_rel_error: float
    ok: bool
    rtol: float
    atol: float
    # A program with half tensors or TF32 matmuls is compared twice (docs/precision.md): above,
    # against eager as it ran; here, against the program run in float32 (None otherwise).
    float32: "CheckResult | None" = None

    def __str__(self) -> str:
        # The test is per element, |got - expected| <= atol + rtol * |expected|: a max rel error
        # above rtol can pass (on elements near 0, where atol covers it), so say which test ran.
        ok = self.ok and (self.float32 is None or self.float32.ok)
        mark, verdict = ("ok", "every element within") if ok else ("MISMATCH", "some element outside")
        text = (f"{mark}: backend={self.backend} max abs error {self.max_abs_error:.3g}, "
                f"max rel error {self.max_rel_error:.3g}; {verdict} atol + rtol*|expected| "
                f"(rtol {self.rtol:.3g}, atol {self.atol:.3g})")
        if self.float32 is not None:
            f = self.float32
            text += (f"\n  against eager: {'ok' if self.ok else 'MISMATCH'}; against the float32 reference: "
                     f"{'ok' if f.ok else 'MISMATCH'}, max abs error {f.max_abs_error:.3g}, max rel error "
                     f"{f.max_rel_error:.3g} (rtol {f.rtol:.3g}, atol {f.atol:.3g})")
        return text

    @property
    def passed(self) -> bool:
        """Within tolerance of eager and, where compared, of the float32 reference."""
        return self.ok and (self.float32 is None or self.float32.ok)


_HALVES = (torch.bfloat16, torch.float16)


def _widen(x):
    """A half tensor as float32 (exactly), a half dtype as float32; anything else as it is."""
    if isinstance(x, torch.Tensor) and x.dtype in _HALVES:
        return x.float()
    return torch.float32 if isinstance(x, torch.dtype) and x in _HALVES else x


class _Float32Run(torch.overrides.TorchFunctionMode):
    """Every torch call in float32: half tensor arguments widened, a half dtype asked for (a
    factory's dtype=, .to(torch.bfloat16), a module's .to) read as float32, .half() and
    .bfloat16() as .float(). The float32 reference of a source that makes its own half
    tensors, as a -c program's module does (nn.Linear(...).to(torch.bfloat16))."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.bfloat16, torch.Tensor.half):
            return args[0].float()
        args, kwargs = torch.utils._pytree.tree_map(_widen, (tuple(args), dict(kwargs or {})))
        return func(*args, **kwargs)


class Compilation(Displayable):
    """One program lowered once, for one target and config: its IRs and the trace. Not
    changed after it is built (assigning an attribute raises FrozenInstanceError): recompile
    makes a new one; nvcc returns what it finds. Only the caches in _CACHES (the loaded CuPy
    kernels) are filled in later."""

    _CACHES = ("_cupy",)

    def __init__(self, source, example_inputs, captured, ctx: Context):
        stages, trace = lower(captured.program, ctx)
        self._captured, self._ctx = captured, ctx
        self.source = source
        self.example_inputs = tuple(example_inputs)
        self.target = ctx.target
        self.precision = ctx.precision
        self.values = captured.values
        self.input_names = captured.input_names
        self._out_spec = captured.out_spec
        self.torch_ir = stages["torch"]
        self.tensor_ir = stages["tensor"]
        # With dedup, tile/kernel/cuda hold each unique kernel once and the Loop IR they were
        # scheduled from keeps the whole program and which kernel each of its launches runs
        # (passes/dedup.py); loop_ir is the whole program, launches () without dedup.
        unique = stages["loop"]
        self.loop_ir = unique if unique.whole is None else unique.whole
        self.launches = unique.launches
        self.tile_ir = stages["tile"]
        self.kernel_ir = stages["kernel"]
        self.cuda = stages["cuda"]
        self.trace = trace
        self._cupy = None
        self._frozen = True

    def __setattr__(self, name, value):
        if getattr(self, "_frozen", False) and name not in self._CACHES:
            raise FrozenInstanceError(
                f"cannot assign {name}: a Compilation is not changed after it is built "
                f"(recompile(config) makes a new one)")
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        raise FrozenInstanceError(f"cannot delete {name}: a Compilation is not changed after it is built")

    # -- execution ------------------------------------------------------------------------
    def run(self, *inputs, backend: str = "auto"):
        """Execute the program on `inputs` (torch tensors) and return torch tensors shaped
        like eager's output."""
        backend = resolve_backend(backend)
        self._require_weights()
        if backend == "cupy":
            return torch.utils._pytree.tree_unflatten(self.cupy_executor().run(inputs), self._out_spec)
        env = self._fresh_env()
        env.update(self._bind(inputs))
        return self._wrap(self._execute(backend, env))

    def state_names(self) -> tuple[str, ...]:
        """The state buffers the program updates in place (a KV cache), in capture order."""
        return tuple(b.name for b in self.torch_ir.buffers if b.kind == "state")

    def _fresh_env(self) -> dict:
        """The values, with copies of the state buffers' initial values: a run that writes its
        state in place (a KV cache) leaves the Compilation's own values as they were."""
        env = dict(self.values)
        env.update((n, np.array(self.values[n], copy=True)) for n in self.state_names())
        return env

    def execute(self, inputs, backend: str = "auto", state: dict | None = None) -> list:
        """The outputs as numpy arrays; `state` (name -> array) gives the state buffers (a KV
        cache), which the program updates in place (their initial values are in `values`).
        On cupy, `state` holds device arrays (from `cupy_executor().new_state()`)."""
        backend = resolve_backend(backend)
        self._require_weights()
        if backend == "cupy":
            # half outputs as float32 arrays holding the half values, as the interpreters hold them
            return [(t.float() if t.dtype in (torch.bfloat16, torch.float16) else t).numpy()
                    for t in self.cupy_executor().run(inputs, state=state)]
        env = self._fresh_env()
        env.update(state or {})
        env.update(self._bind(inputs))
        return self._execute(backend, env)

    def _execute(self, backend: str, env: dict, kernel_ir=None) -> list:
        if backend == "tensor":
            return run_tensor_ir(self.tensor_ir, env)
        if backend == "loop":
            return run_loop_ir(self.loop_ir, env)
        # an intermediate schedule (kernel_ir given): blocks may exceed a GPU's limit
        program, limit = (self.kernel_ir, MAX_BLOCK_THREADS) if kernel_ir is None else (kernel_ir, None)
        from .runtime.sim import simulate_program
        return simulate_program(program, env, launches=self.launches, whole=self.loop_ir if self.launches else None,
                                max_block_threads=limit,
                                max_smem_per_block=self.target.dynamic_smem_per_block if limit else None)

    @property
    def missing_weights(self) -> tuple[str, ...]:
        """Parameters captured without values (weights on the meta device): compile-only."""
        return tuple(b.name for b in self.torch_ir.buffers if b.kind == "param" and b.name not in self.values)

    def _require_weights(self) -> None:
        missing = self.missing_weights
        if missing:
            raise ExecutionError(
                f"this compilation has no weights ({len(missing)} parameters on the meta device, e.g. {missing[0]}): "
                "it is compile-only; build the model with real weights to run it")

    def cupy_executor(self):
        """The kernels loaded on the CUDA device, built on first use (needs a GPU)."""
        if self._cupy is None:
            from .runtime.cupy_backend import CupyExecutor
            self._cupy = CupyExecutor(self.kernel_ir, str(self.cuda), self.input_names, self.values, self.target,
                                      launches=self.launches, whole=self.loop_ir)
        return self._cupy

    def bench(self, *inputs, warmup: int = 10, repeats: int = 100, compare=("eager", "compile"),
              profile: bool = False, name: str = ""):
        """Time the program on the GPU (CUDA events, L2 flushed before every run, median of
        `repeats` after `warmup`) against the tools named in `compare` ("eager", "compile");
        with `profile`, per kernel too. Returns a BenchReport; needs a CUDA device."""
        from .runtime.bench import bench_compilation
        return bench_compilation(self, inputs or self.example_inputs, warmup=warmup, repeats=repeats,
                                 compare=tuple(compare), profile=profile, name=name)

    def _wrap(self, outs):
        types = self.tensor_ir.types()
        tensors = []
        for name, o in zip(self.tensor_ir.outputs, outs):
            t = torch.from_numpy(np.array(o, copy=True, order="C"))
            if types[name].dtype in HALF_DTYPES:      # held in float32, each value exact in the half type
                t = t.to(getattr(torch, types[name].dtype))
            tensors.append(t)
        return torch.utils._pytree.tree_unflatten(tensors, self._out_spec)

    def _bind(self, inputs) -> dict:
        types = {b.name: b.type for b in self.torch_ir.buffers}
        if len(inputs) != len(self.input_names):
            raise ExecutionError(f"expected {len(self.input_names)} inputs ({', '.join(self.input_names)}), "
                                 f"got {len(inputs)}")
        env = {}
        for name, t in zip(self.input_names, inputs):
            if not isinstance(t, torch.Tensor):
                raise ExecutionError(f"input {name} must be a torch.Tensor, got {type(t).__name__}")
            want = types[name]
            got_dtype = str(t.dtype).replace("torch.", "")
            if tuple(t.shape) != want.shape or got_dtype != want.dtype:
                raise ExecutionError(f"input {name} has shape {tuple(t.shape)} {got_dtype}; compiled for "
                                     f"{want.shape} {want.dtype}")
            env[name] = to_numpy(t)
        return env

    def check(self, *inputs, backend: str = "auto", rtol: float | None = None,
              atol: float | None = None) -> CheckResult:
        """Run and compare with torch eager on the same inputs (the example inputs by default).
        A float32 program: rtol 1e-4, `atol` DEFAULT_ATOL scaled by the output's magnitude (see
        default_atol). A program with half tensors is compared with eager in half and with the
        same program in float32, a TF32 one with float32 eager, at tolerances derived from the
        format's unit roundoff and the longest reduction (deplokit/precision.py); `rtol` and
        `atol`, when given, replace the eager comparison's."""
        inputs = inputs or self.example_inputs
        backend = resolve_backend(backend)
        self._require_weights()
        expected = self._eager(inputs)
        got = self.run(*inputs, backend=backend)
        fmt = self.rounding_format
        if fmt is None:
            return _compare(expected, got, backend, 1e-4 if rtol is None else rtol, _atol(atol, expected))
        k = self.reduction_length
        tol, per_scale = rounding_tolerance(fmt, k)
        result = _compare(expected, got, backend, tol if rtol is None else rtol,
                          per_scale * output_scale(expected) if atol is None else atol)
        if fmt == "tf32" or half_decision_operands(self.torch_ir):
            # a comparison, rounding or arg-max of a half value decides on the value rounded as
            # eager does; the float32 run decides on the unrounded one and may differ by a whole
            # step there: eager alone is the reference
            return result
        reference = self.eager_float32(*inputs)
        as_float = torch.utils._pytree.tree_map(lambda t: t.float() if isinstance(t, torch.Tensor) and
                                                t.dtype in (torch.bfloat16, torch.float16) else t, got)
        # only the outputs rounded: each element within its last rounding of the float32 run; a
        # cast to half the program writes (a norm's .to(input_dtype)) rounds mid-way, and its
        # error travels on as eager's does: the eager tolerances
        # (a half value a matmul reads is rounded there even where it is an output too)
        casts = [n for n in self.tensor_ir.nodes if n.type.dtype in HALF_DTYPES and
                 (n.name not in self.tensor_ir.outputs or n.name in self.tensor_ir.stored_half)]
        # flash attention on tensor cores rounds P to half before P @ V (FlashAttention's rounding)
        casts += [k for k in self.tile_ir.kernels if is_flash_mma(k)]
        # outputs stored in float32 that deplokit never rounded (eager rounded a half op on
        # the way): float32's own tolerance
        stored = fmt if any(isinstance(t, torch.Tensor) and t.dtype in (torch.bfloat16, torch.float16)
                            for t in torch.utils._pytree.tree_leaves(got)) else None
        ftol, fatol = (tol, per_scale * output_scale(reference)) if casts else \
            (exact_tolerance(stored) if stored else 1e-4, default_atol(reference))
        exact = _compare(reference, as_float, backend, ftol, fatol)
        return dataclasses.replace(result, float32=exact)

    @property
    def rounding_format(self) -> str | None:
        """The narrowest format the program rounds to: bfloat16 or float16 where it, or eager,
        rounds a value to half (a half output, a cast, a half op eager rounds and deplokit keeps
        in float32 before a .float(); bfloat16 if both), tf32 where its matmuls take TF32
        operands, else None (half inputs read in float32 round nothing: float32 tolerances)."""
        dtypes = {n.type.dtype for n in self.tensor_ir.nodes} | {op.type.dtype for op in self.torch_ir.ops}
        for fmt in ("bfloat16", "float16"):
            if fmt in dtypes:
                return fmt
        return "tf32" if self.precision == "tf32" else None

    @property
    def reduction_length(self) -> int:
        """Terms of the program's longest reduction (a matmul's K, a norm's row)."""
        types = self.tensor_ir.types()
        return max((types[n.src].numel // max(1, n.type.numel) for n in self.tensor_ir.nodes
                    if isinstance(n, Reduction)), default=1)

    def eager_float32(self, *inputs):
        """The source run in float32 (on the example inputs by default): half inputs and a
        module's half weights converted (exactly), every op in float32: check()'s second
        reference for a half program."""
        inputs = inputs or self.example_inputs
        source = self.source
        if isinstance(source, torch.nn.Module):
            source = copy.deepcopy(source).float()
        floats = [_widen(t) for t in inputs]
        with torch.no_grad(), _Float32Run():     # a function that makes half tensors itself (-c)
            return source(*floats)

    def _eager(self, inputs):
        with torch.no_grad():
            on_gpu = [t.device for t in inputs if isinstance(t, torch.Tensor) and t.is_cuda]
            if on_gpu:      # a module's weights (or a function's host tensors) must move there too
                from .runtime.bench import cuda_eager
                return cuda_eager(self.source, inputs, str(on_gpu[0]))(*inputs)
            return self.source(*inputs)

    def check_passes(self, *inputs, rtol: float = 1e-4, atol: float | None = None) -> list["PassCheck"]:
        """Run the Tile IR as it stands after each scheduling pass in the simulator and
        compare with torch eager: a pass that changes meaning is caught at that pass. Each
        step's Tile IR, and the Kernel IR it lowers to, is verified first (passes/verify.py):
        a pass that breaks an invariant raises IRInvariantError naming it."""
        inputs = inputs or self.example_inputs
        self._require_weights()
        expected = self._eager(inputs)
        atol = _atol(atol, expected)
        env = self._fresh_env()
        env.update(self._bind(inputs))
        out, last = [], None
        for step in self.trace:
            if step.stage != "tile":
                continue
            if last is None or step.changed:   # a pass that changed nothing keeps the last result
                verify(step.after, self.target)
                kernel_ir = lower_tiles(step.after, self._ctx)
                verify(kernel_ir)
                got = self._wrap(self._execute("sim", env, kernel_ir))
                last = _compare(expected, got, "sim", rtol, atol)
            out.append(PassCheck(step.name, not step.changed, last))
        return out

    def nvcc(self, arch: str | None = None):
        """Compile the CUDA with nvcc for `arch` (the target by default) and return what it
        found: a runtime.nvcc.CompileResult whose `stats[kernel]` holds ptxas's registers,
        shared memory and spills (`annotate_program(c.kernel_ir, result)` puts them on the
        Kernel IR). The compilation itself is left as it was."""
        arch = arch or self.target.name
        source = self.cuda if arch == self.target.name else render_cuda(self.kernel_ir, Context(get_target(arch)))
        return compile_cuda(str(source), source.build_arch(arch), kernel_names=source.kernels)

    def sass(self, arch: str | None = None):
        """The machine code nvcc makes for `arch` (the target by default), disassembled: each
        kernel's SASS and its hottest loop's instruction mix (deplokit.analysis.sass.SassReport).
        Needs nvcc and cuobjdump or nvdisasm (the `sass` extra); changes nothing here."""
        from .runtime.sass import compile_sass
        return compile_sass(self.cuda, self.kernel_ir, arch or self.target.name, self.target.name)

    # -- tuning ---------------------------------------------------------------------------------
    @property
    def config(self) -> dict:
        """The knobs this compilation was made with (compile's `config`; {} for the defaults)."""
        return dict(self._ctx.config)

    def recompile(self, config: dict) -> "Compilation":
        """The same captured program lowered again with scheduling knobs `config` (no new
        capture): e.g. `c.recompile(c.tune().best_config)`."""
        ctx = Context(self.target, dict(config or {}), dedup=self._ctx.dedup, precision=self.precision,
                      passes=self._ctx.passes)
        return Compilation(self.source, self.example_inputs, self._captured, ctx)

    def tune(self, budget: int = 64, objective: str = "model", listener=None, cache=None, **options):
        """Search the scheduling knobs of every kernel (SP-MCTS; see deplokit.tune.tuner),
        starting from the config this compilation was made with (trial 0 of each kernel), and
        return a deplokit.tune.result.TuneResult; `listener(trial)` is called after each trial;
        `cache`: a path (default ~/.cache/deplokit/tune.db) or a deplokit.tune.cache.TuneCache."""
        from .tune.tuner import tune_compilation
        return tune_compilation(self, budget=budget, objective=objective, listener=listener, cache=cache, **options)

    # -- inspection ---------------------------------------------------------------------------
    def inventory(self):
        """Each unique kernel (split-K reducers included), its launch count, shapes, bytes and
        FLOPs (deplokit/analysis/inventory.py)."""
        return inventory(self.loop_ir, self.launches, self.tile_ir)

    def timeline(self, layer: int | None = 0, report=None):
        """The launches of decoder layer `layer` (a model; the whole program otherwise) in order,
        each with its bytes, FLOPs and the cost model's µs (deplokit/tune/timeline.py); `report`
        (a BenchReport from `bench(profile=True)`) adds measured times."""
        from .tune.timeline import timeline_of
        return timeline_of(self, layer, report)

    def ir(self, stage: str):
        if stage not in STAGES:
            raise ExecutionError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
        return getattr(self, f"{stage}_ir" if stage != "cuda" else "cuda")

    def stepper(self, kernel: str | None = None, check: bool = True, changed_only: bool = False):
        """A widget that walks the Tile-IR passes (SCHEDULE) of `kernel` (the first by default), then
        the Kernel-IR lowering passes: each
        pass's diff, knobs, the IR after it and its simulator check (needs the notebook extra);
        `changed_only` steps through the passes that changed the kernel only."""
        from .notebook.stepper import Stepper
        return Stepper(self, kernel, check=check, changed_only=changed_only)

    def __repr__(self) -> str:
        def count(n: int, word: str) -> str:
            return f"{n} {word}{'' if n == 1 else 's'}"
        inv = self.inventory()      # one vocabulary: launches (split-K reducers too) of unique kernels
        return (f"<Compilation {self.target.name}: {count(len(self.torch_ir.ops), 'torch op')}, "
                f"{count(len(self.tensor_ir.nodes), 'tensor node')}, {count(inv.launches, 'launch')} of "
                f"{count(len(inv), 'unique kernel')}>")


@dataclass(frozen=True)
class PassCheck(Displayable):
    name: str               # e.g. 007_stage_inputs
    skipped: bool
    result: CheckResult

    def __str__(self) -> str:
        mark = "ok" if self.result.ok else "MISMATCH"
        skipped = " (skipped)" if self.skipped else ""
        return f"t:{self.name}: {mark} max error {self.result.max_abs_error:.3g}" + skipped


# Absolute tolerance per unit of output magnitude. A float32 sum of K terms carries rounding
# error proportional to the size of its terms, not of its result: a matmul output that cancels
# to near 0 can differ from torch's (summed in another order) by ~1e-5 x the output's scale,
# where a relative tolerance gives no room. So the default atol grows with max |expected|.
DEFAULT_ATOL = 1e-5


def default_atol(expected) -> float:
    """DEFAULT_ATOL x max(1, largest finite |value| of the expected outputs)."""
    scale = 1.0
    for e in torch.utils._pytree.tree_leaves(expected):
        if isinstance(e, torch.Tensor) and e.dtype.is_floating_point and e.numel():
            finite = e.detach()[torch.isfinite(e)]
            if finite.numel():
                scale = max(scale, float(finite.abs().max()))
    return DEFAULT_ATOL * scale


def output_scale(expected) -> float:
    """The largest finite |value| of the expected outputs (1e-30 when there is none)."""
    scale = 1e-30
    for e in torch.utils._pytree.tree_leaves(expected):
        if isinstance(e, torch.Tensor) and e.dtype.is_floating_point and e.numel():
            finite = e.detach().float()[torch.isfinite(e)]
            if finite.numel():
                scale = max(scale, float(finite.abs().max()))
    return scale


def _atol(atol: float | None, expected) -> float:
    return default_atol(expected) if atol is None else atol


def _compare(expected, got, backend: str, rtol: float, atol: float) -> CheckResult:
    """Same structure, shapes and dtypes; the same non-finite values in the same places;
    finite values within rtol/atol."""
    exp_flat = torch.utils._pytree.tree_leaves(expected)
    got_flat = torch.utils._pytree.tree_leaves(got)
    max_abs = max_rel = 0.0
    ok = len(exp_flat) == len(got_flat)
    for e, g in zip(exp_flat, got_flat):
        if e.shape != g.shape or e.dtype != g.dtype:
            ok = False
            continue
        if not e.dtype.is_floating_point:
            ok &= bool(torch.equal(e, g))
            continue
        e64, g64 = e.detach().double(), g.double()
        finite = torch.isfinite(e64)
        ok &= bool(torch.equal(finite, torch.isfinite(g64)))
        ok &= bool(torch.equal(torch.isnan(e64), torch.isnan(g64)))
        inf = torch.isinf(e64)
        ok &= bool(torch.equal(e64[inf], g64[inf]))
        diff = (e64 - g64).abs()[finite]
        if diff.numel():
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / e64.abs()[finite].clamp_min(1e-30)).max()))
            ok &= bool(torch.allclose(g64[finite], e64[finite], rtol=rtol, atol=atol))
    return CheckResult(backend, max_abs, max_rel, ok, rtol, atol)


def compile(module_or_fn, *example_inputs, target: str = "sm_90", config: dict | None = None,
            dedup: bool = False, tuned=None, scalars: tuple[str, ...] = (), passes=(),
            precision: str = DEFAULT_PRECISION) -> Compilation:
    """Capture `module_or_fn` on `example_inputs` and lower it through every IR. `config`
    sets knobs: {"005_blockify_launch.block_threads": 128, ...}; a key or value no pass
    knows is a ConfigError. A transformers causal LM (LlamaForCausalLM, ...) is compiled as
    input_ids -> logits. `dedup` schedules, materialises and renders each structurally
    unique kernel once. `tuned(loop_program, target)` gives knob values found earlier (the
    tune cache's, see deplokit.tune.tuner.tuned_lookup), looked up during the one lowering;
    `config` wins over them. `scalars` names the inputs that are runtime scalars ((1,) int64,
    e.g. a decode position: arguments of the kernels, see docs/generation.md). `precision`: how
    float32 matmuls multiply, "float32" (exact, the default) or "tf32" (operands rounded to
    TF32, as torch's allow_tf32; docs/precision.md). `passes`: Tile-IR
    passes of one's own (KernelPass, stage "tile"), run after the scheduling passes (SCHEDULE)
    (pipeline.with_passes)."""
    if hf.is_causal_lm(module_or_fn):
        module_or_fn = hf.LogitsOnly(module_or_fn)
    tgt = get_target(target)
    captured = capture(module_or_fn, example_inputs, scalars=tuple(scalars))
    check_precision(precision, [b.type.dtype for b in captured.program.buffers])
    return Compilation(module_or_fn, example_inputs, captured,
                       Context(tgt, dict(config or {}), dedup, tuned, precision=precision, passes=tuple(passes)))


def compile_model(program, target: str = "sm_90", config: dict | None = None, tuned=None,
                  precision: str = DEFAULT_PRECISION) -> Compilation:
    """A model built by name (frontend/models.build): one decoder layer is traced and
    stitched N times (frontend/stitch.py), and identical kernels compile once (dedup)."""
    tgt = get_target(target)
    captured = program.capture()
    check_precision(precision, [b.type.dtype for b in captured.program.buffers])
    return Compilation(program.fn, program.inputs, captured, Context(tgt, dict(config or {}), True, tuned,
                                                                     precision=precision))
