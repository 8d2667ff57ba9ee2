"""The pass stepper: walk the Tile-IR passes (SCHEDULE) of one kernel, then the Kernel-IR lowering
passes (passes/lower/kNNN_*.py) that turn it into Kernel IR, one pass a step.

Each step shows the pass's number, name and one-line DESCRIPTION, its knobs with the values
chosen for this kernel, the diff of the kernel (indentation-aware, changed words marked),
the kernel after the pass (collapsed), and the simulator check of the program as it stands
after the pass (Compilation.check_passes). A pass that did not change the kernel is one
collapsed line saying why. A lowering step diffs the kernel's Kernel IR; the first one,
which leaves Tile IR, shows the Kernel IR it made.

The widget (a "passes that changed something" toggle, Play, a slider labelled with the
passes' numbers and names, previous / next, a kernel picker) is a view over `.steps` and
`.index`; `.next()`, `.prev()` and `.go(i)` move it from code, and work without ipywidgets.
At a plain Python prompt the stepper prints its current step as text.

The trace is read only through the accessor functions below (tile_trace, lowering_trace,
kernel_text, chosen_knobs, skip_reason, step_notes), so a change of the trace's form is one place to follow."""
from __future__ import annotations

import re
import weakref
from dataclasses import dataclass

from ..errors import DeplokitError
from ..ir.kernel_ir import KernelProgram
from ..ir.tile_ir import THREAD, TileProgram
from ..passes.lower import LOWERING
from ..passes.schedule import SCHEDULE
from ..target import MAX_BLOCK_THREADS
from .diff import diff_html
from .extra import NotebookExtraMissing, require
from .highlight import highlight_html
from .linediff import diff_text, line_diff
from .style import BAD, NOTE, OK, box, details, esc, note, table, title

# check_passes simulates the program 16 times: once per Compilation.
_PASS_CHECKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


# -- reading the trace ---------------------------------------------------------------------------
def tile_trace(compilation) -> list:
    """The trace's Tile-IR pass steps, in pass order."""
    return [s for s in compilation.trace if s.stage == "tile"]


def lowering_trace(compilation) -> list:
    """The trace's Kernel-IR lowering steps (Tile IR -> Kernel IR), in pass order."""
    return [s for s in compilation.trace if s.stage == "kernel"]


def ir_stage(ir) -> str:
    """The stage of a step's before / after program: tile or kernel."""
    return "kernel" if isinstance(ir, KernelProgram) else "tile"


def kernel_text(ir, kernel: str) -> str:
    """One kernel's text in a step's before / after program."""
    if isinstance(ir, KernelProgram):
        return "\n\n".join(str(k) for k in ir.kernels if k.name == kernel)
    return str(ir.kernel(kernel))


def chosen_knobs(step, kernel: str) -> dict:
    """Knob name -> the value the pass chose for `kernel` ({} where it did not apply)."""
    decision = step.decision(kernel)
    return dict(decision.knobs) if decision is not None and decision.applied else {}


def skip_reason(step, kernel: str) -> str:
    """Why the pass left `kernel` alone, as the trace recorded it ('' if it said nothing)."""
    decision = step.decision(kernel)
    return decision.skipped if decision is not None else step.skipped_reason


def step_notes(step, kernel: str) -> tuple[str, ...]:
    """What a lowering step said about the program (the `# ...` lines of -vv) that names
    `kernel`; Tile-IR steps speak through their decisions' knobs and skip reasons."""
    if step.stage == "tile":
        return ()
    named = re.compile(rf"(?<!\w){re.escape(kernel)}(?!\w)")      # merged_mm, not merged_mm_reduce
    return tuple(n for n in step.notes if named.search(n))


def pass_knobs(step) -> tuple:
    """The knobs the pass declares (name, domain, doc), in declaration order."""
    return next((p.knobs for p in SCHEDULE + LOWERING if p.name == step.name and p.stage == step.stage), ())


@dataclass(frozen=True)
class KnobChoice:
    name: str
    value: object           # None where the pass did not apply to the kernel
    domain: tuple
    doc: str


@dataclass(frozen=True)
class PassStep:
    index: int              # 0 .. 15 the Tile-IR passes, then the Kernel-IR lowering passes
    name: str               # 007_stage_inputs, 001_materialize
    description: str
    kernel: str
    knobs: tuple[KnobChoice, ...]
    applied: bool           # the pass changed this kernel
    reason: str             # why it did not, when it did not
    before: str             # the kernel's Tile IR (Kernel IR) before and after the pass
    after: str
    stage: str = "tile"     # the IR the pass produces: tile, or kernel for a lowering pass
    before_stage: str = "tile"
    position: int = 1       # 1-based among its stage's passes, of `of`
    of: int = 16
    tag: str = ""           # t:007_stage_inputs, t:kernel:001_materialize (as in -vv)
    notes: tuple[str, ...] = ()
    threads: int = 0        # threads per block of the kernel after a Tile-IR step (0: not a tile step)

    @property
    def unlaunchable(self) -> str:
        """Why the kernel after this step cannot be launched yet ('' when it can): a block of
        more threads than CUDA allows, until 005 blockify_launch splits it into blocks."""
        if self.threads <= MAX_BLOCK_THREADS:
            return ""
        return (f"not launchable yet: a block of {self.threads:,} threads (CUDA allows {MAX_BLOCK_THREADS}); "
                "the simulator runs it all the same, and 005 blockify_launch splits it into blocks")

    @property
    def label(self) -> str:
        """`007 stage_inputs` or `k 001 materialize`: the pass's number and name, as the
        slider shows them."""
        number, _, name = self.name.partition("_")
        return f"{number} {name}" if self.stage == "tile" else f"k {number} {name}"

    @property
    def lowers(self) -> bool:
        """The step leaves Tile IR for Kernel IR: no diff, the Kernel IR it made."""
        return self.before_stage != self.stage

    @property
    def counted(self) -> str:
        kind = "pass" if self.stage == "tile" else "Kernel-IR lowering pass"
        return f"{kind} {self.position} of {self.of}"


def pass_steps(compilation, kernel: str) -> tuple[PassStep, ...]:
    """The Tile-IR trace steps (one per SCHEDULE pass), then the Kernel-IR lowering steps, seen from one kernel."""
    out = []
    for steps in (tile_trace(compilation), lowering_trace(compilation)):
        for position, step in enumerate(steps, 1):
            before, after = kernel_text(step.before, kernel), kernel_text(step.after, kernel)
            chosen = chosen_knobs(step, kernel)
            knobs = tuple(KnobChoice(k.name, chosen.get(k.name), k.domain, k.doc) for k in pass_knobs(step))
            applied = before != after
            reason = "" if applied else (skip_reason(step, kernel) or "no change")
            out.append(PassStep(len(out), step.name, step.description, kernel, knobs, applied, reason, before,
                                after, step.stage, ir_stage(step.before), position, len(steps), step.tag,
                                step_notes(step, kernel), block_threads(step.after, kernel)))
    return tuple(out)


def block_threads(ir, kernel: str) -> int:
    """Threads per block of `kernel` in a Tile program (the product of its THREAD axes); 0
    for another IR."""
    if not isinstance(ir, TileProgram):
        return 0
    n = 1
    for axis in ir.kernel(kernel).tile().axes:
        n *= axis.extent if axis.kind == THREAD else 1
    return n


def pass_checks(compilation) -> tuple | str:
    """Compilation.check_passes(), once per Compilation; an error becomes its message."""
    if compilation not in _PASS_CHECKS:
        try:
            _PASS_CHECKS[compilation] = tuple(compilation.check_passes())
        except DeplokitError as e:
            _PASS_CHECKS[compilation] = f"{type(e).__name__}: {e}"
    return _PASS_CHECKS[compilation]


# -- drawing one step ------------------------------------------------------------------------------
def _check_html(check) -> str:
    if check is None:
        return note("simulator check: off")
    if isinstance(check, str):
        return f'<div>simulator: <span style="color: {BAD}; font-weight: bold">✗</span> {esc(check)}</div>'
    r = check.result
    word = (f'<span style="color: {OK}; font-weight: bold">✓</span>' if r.ok
            else f'<span style="color: {BAD}; font-weight: bold">✗ mismatch</span>')
    same = " (the pass changed nothing: the previous result)" if check.skipped else ""
    return (f"<div>simulator check of the program after this pass: {word} max error "
            f"{r.max_abs_error:.3g}<span style=\"{NOTE}\">{esc(same)}</span></div>")


def _knobs_html(step: PassStep) -> str:
    if not step.knobs:
        return note("no knobs")
    rows = [[f"<code>{esc(k.name)}</code>", "—" if k.value is None else f"<b>{esc(k.value)}</b>",
             esc(", ".join(str(v) for v in k.domain)), esc(k.doc)] for k in step.knobs]
    return table(["knob", "value", "domain", ""], rows)


LOWERING_CHECK = ("simulator check: the check of each Tile-IR pass ran the Kernel IR that all the "
                  "lowering passes make of it")


def step_html(step: PassStep, check) -> str:
    """Everything one step shows, as one HTML block; a pass that changed nothing is one line
    (why), its knobs and unchanged IR collapsed under it."""
    head = title(f'<span style="font-family: var(--jp-code-font-family, monospace)">{esc(step.tag)}</span> '
                 f'<span style="{NOTE}">({step.counted}) {esc(step.description)}</span>')
    ir_name = "Tile IR" if step.stage == "tile" else "Kernel IR"
    ir = details(f"{ir_name} of <code>{esc(step.kernel)}</code> after {esc(step.tag)}",
                 highlight_html(step.after, step.stage))
    if not step.applied:
        why = f"<div>not applied to <code>{esc(step.kernel)}</code>: {esc(step.reason)}</div>"
        return box(head + why + details("knobs", _knobs_html(step)) + ir)
    parts = [head, _knobs_html(step), f"<div>applied to <code>{esc(step.kernel)}</code></div>"]
    parts += [note("# " + esc(n)) for n in step.notes]
    if step.unlaunchable:
        parts.append(f'<div style="color: {BAD}; font-weight: 600">{esc(step.unlaunchable)}</div>')
    if step.stage != "tile":
        parts.append(note(LOWERING_CHECK))
    else:
        parts.append(_check_html(check))
    if step.lowers:     # Tile IR -> Kernel IR: a diff across two languages says nothing
        parts += [f"<div>the Kernel IR it made of <code>{esc(step.kernel)}</code>:</div>",
                  highlight_html(step.after, step.stage),
                  details(f"Tile IR of <code>{esc(step.kernel)}</code> before", highlight_html(step.before, "tile"))]
    else:
        parts += [diff_html(step.before, step.after, step.stage), ir]
    return box("".join(parts))


def step_text(step: PassStep) -> str:
    """One step as plain text: its pass, knobs, and the diff (or why it changed nothing)."""
    lines = [f"{step.tag} ({step.counted}): {step.description}"]
    knobs = ", ".join(f"{k.name}={'—' if k.value is None else k.value}" for k in step.knobs)
    lines.append(f"  knobs: {knobs or 'none'}")
    if not step.applied:
        lines.append(f"  not applied to {step.kernel}: {step.reason}")
        return "\n".join(lines)
    lines += [f"  # {n}" for n in step.notes]
    if step.unlaunchable:
        lines.append(f"  {step.unlaunchable}")
    if step.lowers:
        lines.append(f"  applied to {step.kernel}; the Kernel IR it made:")
        return "\n".join(lines + ["  " + line for line in step.after.splitlines()])
    lines.append(f"  applied to {step.kernel}; diff (+ added, - removed, ~ re-indented only):")
    lines += ["  " + line for line in diff_text(line_diff(step.before, step.after)).splitlines()]
    return "\n".join(lines)


class Stepper:
    def __init__(self, compilation, kernel: str | None = None, check: bool = True, changed_only: bool = False):
        names = [k.name for k in compilation.tile_ir.kernels]
        if not names:
            raise DeplokitError("the stepper needs a kernel; this program has none")
        kernel = names[0] if kernel is None else kernel
        if kernel not in names:
            raise DeplokitError(f"no kernel {kernel!r}; kernels: {', '.join(names)}")
        self.compilation = compilation
        self.kernels = tuple(names)
        self.check = check
        self._kernel = kernel
        self._changed_only = changed_only
        self.steps = pass_steps(compilation, kernel)
        self._index = self.visible[0] if self.visible else 0
        self._widget = None
        self._syncing = False

    # -- driving it from code ------------------------------------------------------------------
    @property
    def kernel(self) -> str:
        return self._kernel

    @kernel.setter
    def kernel(self, name: str) -> None:
        if name not in self.kernels:
            raise DeplokitError(f"no kernel {name!r}; kernels: {', '.join(self.kernels)}")
        self._kernel = name
        self.steps = pass_steps(self.compilation, name)
        if self._index not in self.visible and self.visible:
            self._index = self._nearest_visible(self._index)
        self._sync(options=True)

    @property
    def changed_only(self) -> bool:
        """Step only through the passes that changed the kernel (the others stay countable)."""
        return self._changed_only

    @changed_only.setter
    def changed_only(self, on: bool) -> None:
        self._changed_only = bool(on)
        if self._index not in self.visible and self.visible:
            self._index = self._nearest_visible(self._index)
        self._sync(options=True)

    @property
    def visible(self) -> tuple[int, ...]:
        """The step indices the slider and next / prev walk: all of them, or the applied ones."""
        shown = tuple(s.index for s in self.steps if s.applied or not self._changed_only)
        return shown or tuple(range(len(self.steps)))

    def _nearest_visible(self, i: int) -> int:
        later = [j for j in self.visible if j >= i]
        return later[0] if later else self.visible[-1]

    @property
    def index(self) -> int:
        return self._index

    @index.setter
    def index(self, i: int) -> None:
        self.go(i)

    @property
    def step(self) -> PassStep:
        return self.steps[self._index]

    def go(self, i: int) -> "Stepper":
        """Step `i` (0-based: Tile-IR pass i + 1, then the lowering passes). A step the toggle
        hides turns the toggle off."""
        if not 0 <= i < len(self.steps):
            raise DeplokitError(f"step {i} is out of range: the stepper has steps 0..{len(self.steps) - 1}")
        self._index = i
        if i not in self.visible:
            self._changed_only = False
            self._sync(options=True)
        else:
            self._sync()
        return self

    def next(self) -> "Stepper":
        """The next shown pass; stays on the last one."""
        later = [j for j in self.visible if j > self._index]
        return self.go(later[0] if later else self._index)

    def prev(self) -> "Stepper":
        """The previous shown pass; stays on the first one."""
        earlier = [j for j in self.visible if j < self._index]
        return self.go(earlier[-1] if earlier else self._index)

    def check_of(self, i: int | None = None):
        """The PassCheck of Tile-IR step `i` (the current one by default); None with
        check=False or for a lowering step (every Tile-IR check already runs the lowering)."""
        i = self._index if i is None else i
        if not self.check or self.steps[i].stage != "tile":
            return None
        checks = pass_checks(self.compilation)
        return checks if isinstance(checks, str) else checks[i]

    def html(self) -> str:
        return step_html(self.step, self.check_of() if self.step.applied else None)

    def text(self) -> str:
        tile = [s for s in self.steps if s.stage == "tile"]
        lowering = [s for s in self.steps if s.stage != "tile"]
        head = (f"Stepper over kernel {self._kernel}: {sum(s.applied for s in tile)} of {len(tile)} passes and "
                f"{sum(s.applied for s in lowering)} of {len(lowering)} Kernel-IR lowering passes changed it "
                f"(step {self._index}: .next(), .prev(), .go(i))")
        marks = "  " + " ".join(("[" if s.index == self._index else "") + ("" if s.stage == "tile" else "k")
                                + s.name[:3] + ("*" if s.applied else "") + ("]" if s.index == self._index else "")
                                for s in self.steps)
        return "\n".join([head, marks + "   (* changed the kernel)", step_text(self.step)])

    # -- the widget -------------------------------------------------------------------------------
    @property
    def widget(self):
        if self._widget is None:
            self._widget = self._build()
        return self._widget

    def _options(self) -> list[tuple[str, int]]:
        return [(self.steps[i].label, i) for i in self.visible]

    def _build(self):
        w = require("ipywidgets", "the stepper widget")
        visible = self.visible
        self._toggle = w.Checkbox(value=self._changed_only, description="only passes that changed something",
                                  indent=False, layout=w.Layout(width="auto"))
        self._play = w.Play(value=visible.index(self._index), min=0, max=len(visible) - 1, step=1, interval=1500,
                            description="Play")
        self._slider = w.SelectionSlider(options=self._options(), value=self._index, description="pass",
                                         continuous_update=False, readout=True,
                                         layout=w.Layout(width="460px"), style={"description_width": "initial"})
        w.jslink((self._play, "value"), (self._slider, "index"))
        # a fixed width that never shrinks: in a narrow HBox "auto" buttons were cut to "◀ p…"
        prev_b = w.Button(description="◀ prev", layout=w.Layout(width="90px", min_width="90px", flex="0 0 auto"))
        next_b = w.Button(description="next ▶", layout=w.Layout(width="90px", min_width="90px", flex="0 0 auto"))
        prev_b.on_click(lambda _: self.prev())
        next_b.on_click(lambda _: self.next())
        self._picker = w.Dropdown(options=list(self.kernels), value=self._kernel, description="kernel")
        self._picker.observe(lambda ch: setattr(self, "kernel", ch["new"]), names="value")
        self._slider.observe(lambda ch: self.go(ch["new"]) if ch["new"] is not None and ch["new"] != self._index
                             and not self._syncing else None, names="value")
        self._toggle.observe(lambda ch: setattr(self, "changed_only", ch["new"]), names="value")
        self._view = w.HTML(value=self.html())
        controls = [self._play, prev_b, self._slider, next_b] + ([self._picker] if len(self.kernels) > 1 else [])
        return w.VBox([w.HBox(controls), self._toggle, self._view])

    def _sync(self, options: bool = False) -> None:
        if self._widget is None:
            return
        # New options reset a SelectionSlider to its first one; that event must not move the
        # stepper (unticking "only passes that changed something" jumped back to 001).
        self._syncing = True
        try:
            self._sync_widgets(options)
        finally:
            self._syncing = False
        self._view.value = self.html()

    def _sync_widgets(self, options: bool) -> None:
        if options or [v for _, v in self._slider.options] != list(self.visible):
            self._slider.options = self._options()
            self._play.max = len(self.visible) - 1
            self._play.value = self.visible.index(self._index)
        if self._toggle.value != self._changed_only:
            self._toggle.value = self._changed_only
        if self._slider.value != self._index:
            self._slider.value = self._index
        if self._picker.value != self._kernel:
            self._picker.value = self._kernel

    def _repr_mimebundle_(self, include=None, exclude=None):
        try:
            bundle = dict(self.widget._repr_mimebundle_(include=include, exclude=exclude) or {})
        except NotebookExtraMissing:
            bundle = {}
        # Where no widget manager runs (nbviewer, a saved notebook) the current step shows.
        bundle["text/html"] = self.html()
        bundle["text/plain"] = self.text()
        return bundle

    def __repr__(self) -> str:
        return self.text()
