"""The pass stepper: walk the 16 Tile-IR passes of one kernel, one pass a step.

Each step shows the pass's name and one-line DESCRIPTION, its knobs with the values chosen
for this kernel, the coloured diff of the kernel, the whole kernel after the pass, and the
simulator check of the program as it stands after the pass (Compilation.check_passes).

The widget (Play, slider, previous / next, a kernel picker) is a view over `.steps` and
`.index`; `.next()`, `.prev()` and `.go(i)` move it from code, and work without ipywidgets."""
from __future__ import annotations

import weakref
from dataclasses import dataclass

from ..errors import DeplokitError
from ..passes.schedule import SCHEDULE
from .diff import diff_html
from .extra import NotebookExtraMissing, require
from .highlight import highlight_html
from .style import BAD, NOTE, OK, box, details, esc, note, table, title

# check_passes simulates the program 16 times: once per Compilation.
_PASS_CHECKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class KnobChoice:
    name: str
    value: object           # None where the pass did not apply to the kernel
    domain: tuple
    doc: str


@dataclass(frozen=True)
class PassStep:
    index: int              # 0 .. 15
    name: str               # 007_stage_inputs
    description: str
    kernel: str
    knobs: tuple[KnobChoice, ...]
    applied: bool           # the pass changed this kernel
    reason: str             # why it did not, when it did not
    before: str             # the kernel's Tile IR before and after the pass
    after: str


def pass_steps(compilation, kernel: str) -> tuple[PassStep, ...]:
    """The 16 Tile-IR trace steps seen from one kernel."""
    passes = {p.name: p for p in SCHEDULE}
    out = []
    for step in (s for s in compilation.trace if s.stage == "tile"):
        before, after = step.before.kernel(kernel), step.after.kernel(kernel)
        chosen = dict(dict(step.params).get(kernel, ()))
        knobs = tuple(KnobChoice(k.name, chosen.get(k.name), k.domain, k.doc) for k in passes[step.name].knobs)
        decision = step.decision(kernel)
        reason = decision.skipped if decision else ""
        applied = before != after
        if not applied and not reason:
            reason = "no change"
        out.append(PassStep(len(out), step.name, step.description, kernel, knobs, applied,
                            "" if applied else reason, str(before), str(after)))
    return tuple(out)


def pass_checks(compilation) -> tuple:
    """Compilation.check_passes(), once per Compilation; an error becomes its message."""
    if compilation not in _PASS_CHECKS:
        try:
            _PASS_CHECKS[compilation] = tuple(compilation.check_passes())
        except DeplokitError as e:
            _PASS_CHECKS[compilation] = f"{type(e).__name__}: {e}"
    return _PASS_CHECKS[compilation]


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


def step_html(step: PassStep, total: int, check) -> str:
    """Everything one step shows, as one HTML block."""
    head = title(f'<span style="font-family: var(--jp-code-font-family, monospace)">t:{esc(step.name)}</span> '
                 f'<span style="{NOTE}">({step.index + 1}/{total}) {esc(step.description)}</span>')
    parts = [head]
    if step.knobs:
        rows = [[f"<code>{esc(k.name)}</code>", "—" if k.value is None else f"<b>{esc(k.value)}</b>",
                 esc(", ".join(str(v) for v in k.domain)), esc(k.doc)] for k in step.knobs]
        parts.append(table(["knob", "value", "domain", ""], rows))
    else:
        parts.append(note("no knobs"))
    status = (f"applied to <code>{esc(step.kernel)}</code>" if step.applied
              else f"not applied to <code>{esc(step.kernel)}</code>: {esc(step.reason)}")
    parts.append(f"<div>{status}</div>")
    parts.append(_check_html(check))
    if step.applied:
        parts.append(diff_html(step.before, step.after, "tile"))
    parts.append(details(f"Tile IR of <code>{esc(step.kernel)}</code> after t:{esc(step.name)}",
                         highlight_html(step.after, "tile"), open_=not step.applied))
    return box("".join(parts))


class Stepper:
    def __init__(self, compilation, kernel: str | None = None, check: bool = True):
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
        self.steps = pass_steps(compilation, kernel)
        self._index = 0
        self._widget = None

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
        self._sync()

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
        if not 0 <= i < len(self.steps):
            raise DeplokitError(f"step {i} is out of range: the stepper has steps 0..{len(self.steps) - 1}")
        self._index = i
        self._sync()
        return self

    def next(self) -> "Stepper":
        """The next pass; stays on the last one."""
        return self.go(min(self._index + 1, len(self.steps) - 1))

    def prev(self) -> "Stepper":
        """The previous pass; stays on the first one."""
        return self.go(max(self._index - 1, 0))

    def check_of(self, i: int | None = None):
        """The PassCheck of step `i` (the current one by default), None with check=False."""
        if not self.check:
            return None
        checks = pass_checks(self.compilation)
        return checks if isinstance(checks, str) else checks[self._index if i is None else i]

    def html(self) -> str:
        return step_html(self.step, len(self.steps), self.check_of())

    # -- the widget -------------------------------------------------------------------------------
    @property
    def widget(self):
        if self._widget is None:
            self._widget = self._build()
        return self._widget

    def _build(self):
        w = require("ipywidgets", "the stepper widget")
        last = len(self.steps) - 1
        self._play = w.Play(value=self._index, min=0, max=last, step=1, interval=1500, description="Play")
        self._slider = w.IntSlider(value=self._index, min=0, max=last, description="pass",
                                   continuous_update=False, readout=True)
        w.jslink((self._play, "value"), (self._slider, "value"))
        prev_b = w.Button(description="◀ prev", layout=w.Layout(width="auto"))
        next_b = w.Button(description="next ▶", layout=w.Layout(width="auto"))
        prev_b.on_click(lambda _: self.prev())
        next_b.on_click(lambda _: self.next())
        self._picker = w.Dropdown(options=list(self.kernels), value=self._kernel, description="kernel")
        self._picker.observe(lambda ch: setattr(self, "kernel", ch["new"]), names="value")
        self._slider.observe(lambda ch: self.go(ch["new"]) if ch["new"] != self._index else None, names="value")
        self._view = w.HTML(value=self.html())
        controls = [self._play, prev_b, self._slider, next_b] + ([self._picker] if len(self.kernels) > 1 else [])
        return w.VBox([w.HBox(controls), self._view])

    def _sync(self) -> None:
        if self._widget is None:
            return
        if self._slider.value != self._index:
            self._slider.value = self._index
        if self._picker.value != self._kernel:
            self._picker.value = self._kernel
        self._view.value = self.html()

    def _repr_mimebundle_(self, include=None, exclude=None):
        try:
            bundle = dict(self.widget._repr_mimebundle_(include=include, exclude=exclude) or {})
        except NotebookExtraMissing:
            bundle = {}
        # Where no widget manager runs (nbviewer, a saved notebook) the current step shows.
        bundle["text/html"] = self.html()
        bundle["text/plain"] = repr(self)
        return bundle

    def __repr__(self) -> str:
        return (f"<Stepper kernel {self._kernel}: pass {self._index + 1}/{len(self.steps)} "
                f"t:{self.step.name}>")
