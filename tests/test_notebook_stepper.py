"""The pass stepper, driven from code: its steps, moving, the widget following, checks."""

import pytest
import torch
import torch.nn as nn
from notebook_html import parse, pre_texts
from programs import corpus

import deplokit
from deplokit.notebook.stepper import Stepper, step_notes
from deplokit.passes.lower import LOWERING
from deplokit.passes.schedule import SCHEDULE
from deplokit.trace import TraceStep

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def rms():
    torch.manual_seed(0)
    return deplokit.compile(nn.RMSNorm(300), torch.randn(5, 300))


@pytest.fixture(scope="module")
def sdpa():
    fn, inputs = corpus()["sdpa_causal_gqa"]       # three kernels without attention's fusions
    return deplokit.compile(fn, *inputs, config={"fuse_rows.enable": False, "fuse_attention.enable": False})


STEPS = len(SCHEDULE) + len(LOWERING)


def test_sixteen_steps_then_the_lowering_passes_named_and_described(rms):
    s = rms.stepper()
    assert isinstance(s, Stepper)
    assert [st.name for st in s.steps] == [m.name for m in SCHEDULE + LOWERING]
    assert [st.description for st in s.steps] == [m.description for m in SCHEDULE + LOWERING]
    assert [st.index for st in s.steps] == list(range(STEPS))
    assert [st.stage for st in s.steps] == ["tile"] * 16 + ["kernel"] * len(LOWERING)
    assert s.index == 0 and s.kernel == "merged_rms_norm"


def test_knobs_and_values_follow_the_trace(rms):
    s = rms.stepper()
    tile_steps = [t for t in rms.trace if t.stage == "tile"]
    for st, mod, trace_step in zip(s.steps[:16], SCHEDULE, tile_steps, strict=True):
        assert [k.name for k in st.knobs] == [k.name for k in mod.knobs]
        chosen = dict(dict(trace_step.params).get("merged_rms_norm", ()))
        for k in st.knobs:
            assert k.value == chosen.get(k.name)
            if k.value is not None:
                assert k.value in k.domain
        # the kernel's text before and after is the trace's
        assert st.after == str(trace_step.after.kernel("merged_rms_norm"))
        assert st.applied == (trace_step.before.kernel("merged_rms_norm") != trace_step.after.kernel("merged_rms_norm"))
        if not st.applied:
            assert st.reason
    by = {st.name: st for st in s.steps}
    assert by["004_cooperative_reduce"].applied and by["007_stage_inputs"].applied
    assert not by["008_register_tile"].applied and "matmul" in by["008_register_tile"].reason
    # the last Tile-IR step's IR is the compilation's Tile IR
    assert s.steps[15].after == str(rms.tile_ir.kernel("merged_rms_norm"))


def test_next_prev_go_and_bounds(rms):
    s = rms.stepper(check=False)
    s.next().next()
    assert s.index == 2 and s.step.name == "003_split_matmul_k"
    s.prev()
    assert s.index == 1
    s.prev().prev()
    assert s.index == 0                  # stays on the first
    s.go(STEPS - 1).next()
    assert s.index == STEPS - 1          # stays on the last
    s.index = 6
    assert s.step.name == "007_stage_inputs"
    with pytest.raises(deplokit.DeplokitError, match="out of range"):
        s.go(STEPS)
    assert "t:007_stage_inputs" in repr(s)
    assert len(repr(s).splitlines()) > 3                    # at a plain prompt: readable text


def test_step_html_shows_diff_ir_knobs_and_check(rms):
    s = rms.stepper().go(6)
    html = s.html()
    parse(html)
    assert "t:007_stage_inputs" in html and "(pass 7 of 16)" in html and "hoist hot input slabs" in html
    assert "<code>stage</code>" in html and "<b>True</b>" in html
    assert "rgba(46, 160, 67" in html                        # the coloured diff
    assert str(rms.tile_ir.kernel("merged_rms_norm")).splitlines()[0] in pre_texts(html)[-1]
    check = s.check_of()
    assert check.name == "007_stage_inputs" and check.result.ok
    assert "✓" in html and f"{check.result.max_abs_error:.3g}" in html


def test_every_step_is_checked_on_the_simulator(rms):
    s = rms.stepper()
    checks = [s.check_of(i) for i in range(16)]
    assert [c.name for c in checks] == [st.name for st in s.steps[:16]]
    assert all(c.result.ok and c.result.backend == "sim" for c in checks)
    # each Tile-IR check ran the whole lowering: a lowering step has none of its own
    assert [s.check_of(i) for i in range(16, len(s.steps))] == [None] * len(LOWERING)


def test_check_off_never_simulates(monkeypatch):
    torch.manual_seed(0)
    c = deplokit.compile(nn.Softmax(dim=-1), torch.randn(3, 17))

    def boom(*a, **k):
        raise AssertionError("check_passes must not run")
    monkeypatch.setattr(type(c), "check_passes", boom)     # a Compilation itself is frozen
    s = c.stepper(check=False)
    s.go(next(st.index for st in s.steps if st.applied))
    assert s.check_of() is None and "simulator check: off" in s.html()


def test_widget_follows_code_and_code_follows_widget(rms):
    ipywidgets = pytest.importorskip("ipywidgets")
    s = rms.stepper()
    w = s.widget
    assert isinstance(w, ipywidgets.VBox)
    s.next()
    assert s._slider.value == 1 and "t:002_chunk_matmul_k" in s._view.value
    s._slider.value = 12                  # what dragging the slider (or Play, through jslink) does
    assert s.index == 12 and "t:013_async_copy" in s._view.value
    buttons = [c for c in w.children[0].children if isinstance(c, ipywidgets.Button)]
    assert [b.description for b in buttons] == ["◀ prev", "next ▶"]
    buttons[0].click()
    assert s.index == 11
    buttons[1].click()
    buttons[1].click()
    assert s.index == 13
    plays = [c for c in w.children[0].children if isinstance(c, ipywidgets.Play)]
    assert plays and plays[0].max == STEPS - 1
    bundle = s._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "text/html" in bundle and "t:014_pad_smem" in bundle["text/html"]


def test_kernel_picker_walks_another_kernel(sdpa):
    s = sdpa.stepper()
    names = [k.name for k in sdpa.tile_ir.kernels]
    assert s.kernels == tuple(names) and len(names) == 3
    s.go(4)
    s.kernel = names[1]
    assert s.index == 4 and all(st.kernel == names[1] for st in s.steps)
    assert s.steps[15].after == str(sdpa.tile_ir.kernel(names[1]))
    pytest.importorskip("ipywidgets")
    w = s.widget
    s._picker.value = names[2]
    assert s.kernel == names[2] and names[2] in s._view.value
    assert w is s.widget
    with pytest.raises(deplokit.DeplokitError, match="no kernel"):
        s.kernel = "nope"
    with pytest.raises(deplokit.DeplokitError, match="no kernel 'nope'"):
        sdpa.stepper("nope")


def test_stepper_on_a_matmul_shows_its_register_tile():
    fn, inputs = corpus()["matmul_odd"]
    c = deplokit.compile(fn, *inputs)
    s = c.stepper(check=False)
    by = {st.name: st for st in s.steps}
    assert by["002_chunk_matmul_k"].applied
    assert any(k.name == "k_chunk" and k.value is not None for k in by["002_chunk_matmul_k"].knobs)
    parse(s.go(7).html())


@pytest.fixture(scope="module")
def matmul():
    torch.manual_seed(0)
    return deplokit.compile(torch.matmul, torch.randn(128, 256), torch.randn(256, 128))


def test_changed_only_walks_the_passes_that_changed_the_kernel(matmul):
    s = matmul.stepper(check=False, changed_only=True)
    applied = tuple(st.index for st in s.steps if st.applied)
    assert s.visible == applied and 0 < len(applied) < STEPS
    assert s.index == applied[0]
    walked = [s.index]
    for _ in range(20):
        walked.append(s.next().index)
    assert sorted(set(walked)) == list(applied)             # next() skips what changed nothing
    assert s.prev().index == applied[-2]
    skipped = next(st.index for st in s.steps if not st.applied)
    s.go(skipped)                                           # a hidden step: the toggle turns off
    assert s.index == skipped and not s.changed_only and len(s.visible) == STEPS
    s.changed_only = True                                   # back on: the next shown step
    assert s.index in applied and s.index >= skipped


def test_slider_labels_are_pass_numbers_and_names(matmul):
    pytest.importorskip("ipywidgets")
    s = matmul.stepper(check=False, changed_only=True)
    s.widget
    labels = [label for label, _ in s._slider.options]
    assert labels[0] == "001 tileify" and "008 register_tile" in labels
    assert "004 cooperative_reduce" not in labels           # changed nothing on a matmul
    assert labels[labels.index("k 001 materialize") + 1] == "k 002 stage_copies"
    assert "k 003 unclash_names" not in labels              # no local meets a parameter's name
    s._toggle.value = False
    assert len(s._slider.options) == STEPS and s._play.max == STEPS - 1
    assert [label for label, _ in s._slider.options[16:]] == [f"k {p.name.replace('_', ' ', 1)}" for p in LOWERING]
    s._slider.value = 3                                     # 004: a skipped step, one line and collapsed
    html = s._view.value
    assert "not applied to" in html and "<details" in html and "(pass 4 of 16)" in html
    assert "rgba(46, 160, 67" not in html                   # no diff for a pass that did nothing


def test_a_reindenting_pass_shows_what_changed_not_the_whole_block(matmul):
    s = matmul.stepper(check=False)
    step = s.steps[0]                                       # 001 tileify wraps the body in a Tile
    assert step.applied
    text = repr(s.go(0))
    body = [line for line in text.splitlines() if line.startswith("  ~")]
    assert body, "re-indented lines are marked, not removed and re-added"
    removed = [line for line in text.splitlines() if line.startswith("  -")]
    assert len(removed) <= 2                                # the two free loops, not the whole body
    html = s.html()
    parse(html)
    assert "re-indented only" in html


def _kernel_ir_of(program, kernel: str) -> str:
    """The kernel's Kernel IR."""
    return "\n\n".join(str(k) for k in program.kernels if k.name == kernel)


def test_the_lowering_passes_are_steps_with_their_kernel_ir_diff(matmul):
    """Issue 12 part 5: each Kernel-IR lowering pass is a step of the stepper, as in -vv."""
    s = matmul.stepper(check=False)
    lowering = [t for t in matmul.trace if t.stage == "kernel"]
    steps = s.steps[16:]
    assert [st.name for st in steps] == [t.name for t in lowering] == [p.name for p in LOWERING]
    for st, t in zip(steps, lowering, strict=True):
        assert st.after == _kernel_ir_of(t.after, "merged_matmul")
        assert st.applied == (t.changed and st.before != st.after)
    materialize, copies = steps[:2]
    # the first leaves Tile IR: what it made is shown whole, the Tile IR before it collapsed
    assert materialize.lowers and materialize.before == s.steps[15].after
    text = repr(s.go(16))
    assert f"t:kernel:001_materialize (Kernel-IR lowering pass 1 of {len(LOWERING)})" in text
    assert "  " + materialize.after.splitlines()[0] in text and "k001*" in text
    html = s.html()
    parse(html)
    assert "Kernel IR" in html and "simulator check: off" not in html
    assert materialize.after.splitlines()[0] in pre_texts(html)[0]
    # a later one diffs Kernel IR: 002 spells the staged copies out
    assert copies.applied and not copies.lowers and copies.before == materialize.after
    text = repr(s.go(17))
    assert f"t:kernel:002_stage_copies (Kernel-IR lowering pass 2 of {len(LOWERING)})" in text
    assert "diff (+ added, - removed" in text and "\n  +" in text and "\n  -" in text
    html = s.html()
    parse(html)
    assert "rgba(46, 160, 67" in html and s.check_of() is None
    assert s.steps[-1].after == _kernel_ir_of(matmul.kernel_ir, "merged_matmul")


def test_a_lowering_steps_notes_are_shown_on_the_kernels_they_name():
    # a lowering step's notes are shown on the kernels they name, as whole names
    step = TraceStep("kernel", "003_unclash_names", notes=("merged_matmul_reduce: locals tid renamed",
                                                           "merged_matmul: locals acc0 renamed"))
    assert step_notes(step, "merged_matmul") == ("merged_matmul: locals acc0 renamed",)


def test_a_lowering_pass_that_changes_nothing_is_one_collapsed_line(rms):
    s = rms.stepper(check=False)
    unclash = next(st for st in s.steps if st.stage == "kernel" and st.name == "003_unclash_names")
    # no local meets a parameter's name
    assert unclash.index == len(SCHEDULE) + 2 and not unclash.applied and unclash.reason
    html = s.go(unclash.index).html()
    parse(html)
    assert "not applied to" in html and "rgba(46, 160, 67" not in html
    s.changed_only = True
    # 001 materialize always changes it
    assert unclash.index not in s.visible and s.steps[len(SCHEDULE)].index in s.visible


def test_unticking_changed_only_in_the_widget_stays_on_the_step(matmul):
    """Unticking "only passes that changed something" gives the slider new options, which
    resets it to its first; the stepper must stay where it was (it jumped back to 001)."""
    ipywidgets = pytest.importorskip("ipywidgets")
    s = matmul.stepper(check=False, changed_only=True)
    w = s.widget
    s.next().next()
    here = s.index
    assert here > 0
    s._toggle.value = False
    assert not s.changed_only and s.index == here and s._slider.value == here
    s._toggle.value = True
    assert s.changed_only and s.index == here
    buttons = [c for c in w.children[0].children if isinstance(c, ipywidgets.Button)]
    assert all(b.layout.min_width == b.layout.width for b in buttons)       # never squeezed to "◀ p…"


def test_a_block_too_large_to_launch_says_so_until_blockify(matmul):
    s = matmul.stepper(check=False)
    first = s.steps[0]                          # 001 tileify: one thread per output element
    assert first.threads == 128 * 128 and "not launchable yet" in first.unlaunchable
    assert "not launchable yet" in s.go(0).html() and "16,384 threads" in s.text()
    blockify = next(st for st in s.steps if st.name == "005_blockify_launch")
    assert 0 < blockify.threads <= 1024 and blockify.unlaunchable == ""
    assert all(st.unlaunchable == "" for st in s.steps[blockify.index:])
