"""The pass record: what every pass of the pipeline declares, and the one way it is run.

A pass has a name (`decompose`, `007_stage_inputs`), the stage of IR it produces, a
one-line description, its knobs (name, finite domain, default heuristic), and

    apply(ir, pctx) -> IR | Skip(reason) | Noted(IR, notes)

`pctx` (a PassContext) holds the target, the knob values chosen for this call, the program's
tensor types and the compile's Context. Two kinds, one protocol:

- `Pass` applies to the whole program (decompose, fuse, dedup, render): one trace step.
- `KernelPass` applies kernel by kernel (the scheduling passes (SCHEDULE), per-kernel Kernel-IR
  lowering passes): each kernel gets its own knob values (config `kernel:NNN_pass.knob`
  first, then `NNN_pass.knob`, then the knob's default), and the trace step records one
  Decision per kernel. `needs` gates a pass on a target capability ("sm_90+ TMA"), a
  flag knob (`flag_knob`) turns it off; both are checked before `apply` runs.

Both return their TraceStep from `run(ir, ctx)`; the pipeline is a flat tuple of them
(deplokit/pipeline.py). The autotuner runs `KernelPass.apply_to` too: one mechanism."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import ConfigError
from ..ir.names import fresh_name  # noqa: F401  (the one fresh-name rule, re-exported for passes)
from ..ir.tile_ir import Tile
from ..target import Target
from ..trace import Context, Decision, TraceStep


@dataclass(frozen=True)
class Knob:
    name: str
    domain: tuple
    default: Callable[..., Any]     # (kernel or program, target) -> a value in domain
    doc: str = ""
    off: str = ""                   # a flag knob: why the pass skips when it is False
    # (kernel, target) -> the values the tuner may pick (default: the whole domain): a knob
    # whose other values change the program's numbers (tf32 inputs) keeps them out of a search
    # for a program that did not ask for them
    searched: Callable[..., tuple] | None = None

    def search_domain(self, ir, target) -> tuple:
        return self.domain if self.searched is None else self.searched(ir, target)


def _on(ir, target) -> bool:
    return True


def flag_knob(name: str, doc: str, what: str = "") -> Knob:
    """An on/off knob, on by default. With `what`, a pass whose flag is off skips (the
    program, or the kernel) with `<what> disabled by the knob`; without, it reads the flag."""
    return Knob(name, (True, False), _on, doc, off=f"{what} disabled by the knob" if what else "")


@dataclass(frozen=True)
class Skip:
    """The pass does not apply (to this kernel, or to the program): the trace says why."""
    reason: str


@dataclass(frozen=True)
class Noted:
    """The pass applied and explains a choice (why accesses stay scalar, what fusion stored):
    `notes` a tuple of lines (one string is taken as one line). `used`: the knob values the
    pass actually applied where they differ from those it was given ((name, value) pairs, a
    dict is taken in order; value None: the knob had no effect on this kernel), decided once
    here and recorded on the trace's Decision for -v and the stepper to read."""
    ir: Any
    notes: tuple[str, ...] = ()
    used: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        if isinstance(self.notes, str):
            object.__setattr__(self, "notes", (self.notes,) if self.notes else ())
        if isinstance(self.used, Mapping):
            object.__setattr__(self, "used", tuple(self.used.items()))


@dataclass(frozen=True)
class Needs:
    """A target capability a pass requires: `Needs("tma", "TMA (sm_90+)")` skips the pass on a
    target whose `tma` is False, saying `sm_80 has no TMA (sm_90+)`."""
    capability: str          # a bool field of deplokit.target.Target
    what: str

    def missing(self, target: Target) -> str:
        return "" if getattr(target, self.capability) else f"{target.name} has no {self.what}"


@dataclass(frozen=True)
class PassContext:
    """What one application of a pass reads besides its input IR."""
    target: Target
    knobs: Mapping[str, Any] = field(default_factory=dict)
    types: Mapping[str, Any] = field(default_factory=dict)   # tensor name -> TensorType
    compile: Context | None = None


def program_types(program) -> dict:
    """Tensor name -> TensorType of every buffer a program declares (Loop, Tile, Kernel IR)."""
    return {b.name: b.type for b in tuple(program.buffers) + tuple(program.written)}


def switched_off(knobs: tuple[Knob, ...], values: Mapping) -> Skip | None:
    """Skip(`<what> disabled by the knob`) for the first flag knob (`flag_knob(..., what)`)
    that is off, else None."""
    return next((Skip(k.off) for k in knobs if k.off and not values[k.name]), None)


def replace_tile(kernel, tile):
    """The kernel with its one Tile replaced by `tile` (its locals, knobs and other fields kept)."""
    return dataclasses.replace(kernel, body=tuple(tile if isinstance(s, Tile) else s for s in kernel.body))


@dataclass(frozen=True)
class Pass:
    """A pass over the whole program."""
    name: str
    stage: str                       # the IR it produces: tensor, loop, tile, kernel, cuda
    description: str
    apply: Callable[[Any, PassContext], Any]
    knobs: tuple[Knob, ...] = ()

    @property
    def tag(self) -> str:
        return f"t:{self.name}" if self.stage == "tile" else f"t:{self.stage}:{self.name}"

    def knob_values(self, ir, target: Target, config: Mapping) -> dict:
        return {k.name: _value(config, (f"{self.name}.{k.name}",), k, ir, target) for k in self.knobs}

    def run(self, ir, ctx: Context) -> TraceStep:
        config = ctx.program_knob_config(ir) if self.knobs else ctx.config
        pctx = PassContext(ctx.target, self.knob_values(ir, ctx.target, config), compile=ctx)
        result = switched_off(self.knobs, pctx.knobs) or self.apply(ir, pctx)
        step = dict(stage=self.stage, name=self.name, before=ir, description=self.description)
        tuned = ctx.tuned_program_knobs(f"{self.name}.{k.name}" for k in self.knobs)
        why = ("the tuner's program-level choice (the cheapest program under the tune objective): "
               + ", ".join(f"{k}={v}" for k, v in tuned.items())) if tuned else ""
        after, notes = (result.ir, result.notes) if isinstance(result, Noted) else (result, ())
        if not isinstance(result, Skip) and (after is ir or after == ir):
            # a no-op is a skip with its reason, as KernelPass reports one
            result = Skip("; ".join(notes) or f"{self.name} found nothing to change")
        if isinstance(result, Skip):
            return TraceStep(after=ir, skipped_reason="; ".join(filter(None, (result.reason, why))), **step)
        return TraceStep(after=after, notes=notes + ((why,) if why else ()), **step)


@dataclass(frozen=True)
class KernelPass:
    """A pass applied to each kernel of a program (`program.kernels`), with per-kernel knobs.
    `prepare` turns the incoming program into the form the kernels are rewritten in (Loop IR
    into Tile IR before 001), once, before any kernel is looked at. `stamp_knobs`: the knob
    values a kernel was rewritten with are appended to its `knobs` (Tile IR records every
    scheduling choice); a pass over kernels without that field sets it False."""
    name: str
    stage: str
    description: str
    apply: Callable[[Any, PassContext], Any]
    knobs: tuple[Knob, ...] = ()
    needs: tuple[Needs, ...] = ()
    prepare: Callable[[Any], Any] | None = None
    stamp_knobs: bool = True
    flash_aware: bool = False     # applies to flash attention's kernels (scheduled whole by 001)

    @property
    def tag(self) -> str:
        return f"t:{self.name}" if self.stage == "tile" else f"t:{self.stage}:{self.name}"

    def knob_values(self, kernel, target: Target, config: Mapping) -> dict:
        """Each knob's value for this kernel: `kernel:NNN_pass.knob`, else `NNN_pass.knob`,
        else the knob's default heuristic."""
        return {k.name: _value(config, (f"{kernel.name}:{self.name}.{k.name}", f"{self.name}.{k.name}"), k,
                               kernel, target) for k in self.knobs}

    def apply_to(self, kernel, target: Target, knobs: Mapping, types: Mapping, ctx: Context | None = None):
        """(rewritten kernel | Skip, note): one kernel, as the pipeline and the tuner's search
        space both run it. The knob values it ran with are recorded on the kernel (`knobs`)."""
        result, note, _ = self.apply_used(kernel, target, knobs, types, ctx)
        return result, note

    def apply_used(self, kernel, target: Target, knobs: Mapping, types: Mapping, ctx: Context | None = None):
        """apply_to's (result, note) and the knob values the pass reported it actually used
        where they differ from `knobs` (Noted.used; () when it used them as given)."""
        for need in self.needs:
            if need.missing(target):
                return Skip(need.missing(target)), "", ()
        if getattr(getattr(kernel, "flash", None), "mma", None) is not None and self.stage == "tile" \
                and self.name != "001_tileify":
            return Skip("flash attention on tensor cores: 001 tileify spells its whole schedule from "
                        "fuse_attention's record (FlashPlan.mma)"), "", ()
        if getattr(kernel, "flash", None) is not None and self.stage == "tile" and not self.flash_aware:
            return Skip(
                "flash attention: 001 tileify (its plan), 007, 010, 011, 013 and 015 (its K/V tiles) schedule it"
            ), "", ()
        off = switched_off(self.knobs, knobs)
        if off is not None:
            return off, "", ()
        result = self.apply(kernel, PassContext(target, knobs, types, ctx))
        if isinstance(result, Skip):
            return result, "", ()
        note, used = "", ()
        if isinstance(result, Noted):          # applied, declining part of what a knob asked
            used = tuple((n, v) for n, v in result.used if n in knobs and knobs[n] != v)
            result, note = result.ir, "; ".join(result.notes)
        if knobs and self.stamp_knobs:
            result = dataclasses.replace(result, knobs=result.knobs + tuple(
                (f"{self.name}.{n}", v) for n, v in knobs.items()))
        return result, note, used

    def run(self, program, ctx: Context) -> TraceStep:
        config = ctx.knob_config(program)
        if self.prepare is not None:
            program = self.prepare(program)
        types = program_types(program)
        kernels, decisions = [], []
        for k in program.kernels:
            knobs = self.knob_values(k, ctx.target, config)
            result, note, used = self.apply_used(k, ctx.target, knobs, types, ctx)
            if isinstance(result, Skip):
                decisions.append(Decision(k.name, skipped=result.reason))
                kernels.append(k)
                continue
            decisions.append(Decision(k.name, tuple(knobs.items()), note=note, used=used))
            kernels.append(result)
        after = dataclasses.replace(program, kernels=tuple(kernels))
        skipped = "" if after != program else (
            "; ".join(f"{d.kernel}: {d.skipped}" for d in decisions if d.skipped) or "no kernel to schedule")
        return TraceStep(self.stage, self.name, program, after, tuple(decisions), skipped_reason=skipped,
                         description=self.description)


def in_domain(value, knob: Knob) -> bool:
    """`value` is one of the knob's values, of the same kind (True is not 1)."""
    return any(value == d and isinstance(value, bool) == isinstance(d, bool) for d in knob.domain)


def _value(config: Mapping, keys, knob: Knob, ir, target):
    for key in keys:
        if key in config:
            value = config[key]
            if not in_domain(value, knob):
                raise ConfigError(f"config {key}={value!r} is outside its domain {knob.domain}")
            return value
    return knob.default(ir, target)


def run_passes(passes, ir, ctx: Context) -> tuple[Any, tuple[TraceStep, ...]]:
    """`ir` through `passes` in order: the last IR and one trace step per pass."""
    steps = []
    for p in passes:
        steps.append(p.run(ir, ctx))
        ir = steps[-1].after
    return ir, tuple(steps)


def validate_kernel_names(config: Mapping, kernels) -> None:
    """Raise ConfigError for a `kernel:NNN_pass.knob` key naming no kernel in `kernels`."""
    names = set(kernels)
    for key in config:
        kernel = key.rpartition(".")[0].rpartition(":")[0]
        if kernel and kernel not in names:
            raise ConfigError(f"config key {key!r}: the program has no kernel {kernel!r}; "
                              f"its kernels: {', '.join(sorted(names))}")


def _describe(p) -> str:
    if not p.knobs:
        return f"{p.name} has no knobs"
    return f"{p.name}'s knobs: " + ", ".join(f"{k.name} in {k.domain}" for k in p.knobs)


def validate_config(config: Mapping, passes) -> None:
    """Raise ConfigError unless every key of `config` names a knob of one of `passes`
    (`NNN_pass.knob`, or `kernel:NNN_pass.knob` for a pass that runs kernel by kernel) and
    its value lies in that knob's domain. The message lists the pass's knobs."""
    by_name = {p.name: p for p in passes}
    for key, value in config.items():
        if not isinstance(key, str) or "." not in key:
            raise ConfigError(
                f"config key {key!r} is not of the form PASS.KNOB (e.g. 005_blockify_launch.block_threads)"
            )
        scoped, _, knob_name = key.rpartition(".")
        kernel, _, pass_name = scoped.rpartition(":")
        p = by_name.get(pass_name)
        if p is None:
            tunable = ", ".join(q.name for q in passes if q.knobs)
            raise ConfigError(f"config key {key!r}: no pass named {pass_name!r}; passes with knobs: {tunable}")
        if kernel and not isinstance(p, KernelPass):
            raise ConfigError(f"config key {key!r}: {p.name} runs on the whole program, not per kernel; "
                              f"write {p.name}.{knob_name}")
        knob = next((k for k in p.knobs if k.name == knob_name), None)
        if knob is None:
            raise ConfigError(f"config key {key!r}: {pass_name} has no knob {knob_name!r}; {_describe(p)}")
        if not in_domain(value, knob):
            raise ConfigError(f"config {key}={value!r} is outside its domain {knob.domain}; {_describe(p)}")
