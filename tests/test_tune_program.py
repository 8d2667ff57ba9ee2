"""The tuner's program-level choices (tune/program_space.py): fusion on or off, a reduction
split or not, compared before any kernel is tuned, cached, and read back by compile."""
import functools

import torch
import torch.nn.functional as F

import deplokit
from deplokit.cli import main
from deplokit.cli.program import TunedLookup
from deplokit.tune.cache import TuneCache
from deplokit.tune.program_space import ProgramSpace, choice_input, program_key


def _causal_gqa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _inputs():
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(*s, generator=g) for s in ((1, 4, 16, 16), (1, 2, 16, 16), (1, 2, 16, 16)))


@functools.lru_cache(maxsize=None)
def _compiled(**config):
    return deplokit.compile(_causal_gqa, *_inputs(), config=dict(config))


def _tune(tmp_path, c=None, **options):
    return (c or _compiled()).tune(budget=2, cache=str(tmp_path / "t.db"), ptxas=False, **options)


def test_space_merges_knob_values_that_make_the_same_program():
    space = ProgramSpace(_compiled())
    options = space.options()
    programs = [o.program for o in options]
    assert all(a != b for i, a in enumerate(programs) for b in programs[i + 1:])     # distinct
    enables = {dict(o.config)["fuse_attention.enable"] for o in options}
    assert enables == {True, False}
    # the defaults' program first: the one the compile made
    assert options[0].program == _compiled().loop_ir
    assert [k.flash is not None for k in options[0].program.kernels] == [True]
    # no option for split_reduce's counts: nothing in attention is split, they all merge
    assert {dict(o.config)["split_reduce.splits"] for o in options} == {"auto"}


def test_tune_compares_the_programs_and_tunes_the_cheapest(tmp_path):
    result = _tune(tmp_path)
    assert len(result.programs) == len(ProgramSpace(_compiled()).options()) >= 2
    assert all(t.ok and t.kernel == "(program)" for t in result.programs)
    cheapest = min(result.programs, key=lambda t: (t.cost_us, t.index))
    assert result.program_config == cheapest.config
    chosen = dict(result.program_config)
    assert {k: v for k, v in result.best_config.items() if ":" not in k} == chosen
    # the kernels tuned are the chosen program's, and best_config rebuilds that program
    again = _compiled().recompile(result.best_config)
    assert [name for name, _ in result.kernels] == [k.name for k in again.loop_ir.kernels]
    assert again.check(backend="sim").ok
    # every program trial is in the cache under the program's key
    with TuneCache(str(tmp_path / "t.db")) as store:
        key = program_key(choice_input(_compiled().trace))
        stored = store.trials(key, "sm_90", "model")
    assert sorted(sorted(t.config) for t in stored) == sorted(sorted(t.config) for t in result.programs)


def test_a_second_tune_reads_the_programs_back_and_decides_the_same(tmp_path):
    first = _tune(tmp_path)
    second = _tune(tmp_path)
    assert all(t.cached for t in second.programs)
    assert [(t.config, t.cost_us) for t in second.programs] == [(t.config, t.cost_us) for t in first.programs]
    assert second.best_config == first.best_config


def test_compile_picks_up_the_tuned_choice_and_the_trace_says_why(tmp_path, capsys):
    result = _tune(tmp_path)
    chosen = dict(result.program_config)
    c = deplokit.compile(_causal_gqa, *_inputs(), tuned=TunedLookup(str(tmp_path / "t.db")))
    want = _compiled().recompile(chosen)
    assert c.loop_ir == want.loop_ir
    err = capsys.readouterr().err
    assert (
        "using the tuned program-level choice" in err
        and f"fuse_attention.enable={chosen['fuse_attention.enable']}" in err
    )
    step = next(s for s in c.trace if s.name == "fuse_attention")
    said = step.skipped_reason + " ".join(step.notes)
    assert (
        "the tuner's program-level choice" in said
        and f"fuse_attention.enable={chosen['fuse_attention.enable']}" in said
    )
    # a knob the config names wins over the tuned choice
    other = not chosen["fuse_attention.enable"]
    c = deplokit.compile(_causal_gqa, *_inputs(), tuned=TunedLookup(str(tmp_path / "t.db")),
                         config={"fuse_attention.enable": other, "fuse_attention.by_cost": False})
    assert any(k.flash is not None for k in c.loop_ir.kernels) == other


def test_knobs_the_config_names_are_held_out_of_the_search(tmp_path):
    c = _compiled(**{"fuse_attention.enable": False})
    result = _tune(tmp_path, c)
    assert result.programs and all(dict(t.config)["fuse_attention.enable"] is False for t in result.programs)


def test_a_program_with_one_option_has_no_program_trials(tmp_path):
    c = deplokit.compile(torch.relu, torch.randn(4, 64))
    result = c.tune(budget=2, cache=str(tmp_path / "t.db"), ptxas=False)
    assert result.programs == () and result.program_config == ()
    assert result.history and all(t.kernel != "(program)" for t in result.history)


def test_cli_table_lists_the_programs_and_marks_the_chosen_one(tmp_path, capsys):
    expr = ("torch.nn.functional.scaled_dot_product_attention(torch.randn(1,4,16,16), torch.randn(1,4,16,16), "
            "torch.randn(1,4,16,16), is_causal=True)")
    code = main(["tune", "-c", expr, "--budget", "2", "--cache", str(tmp_path / "t.db")])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [ln for ln in out.splitlines() if ln.startswith("program ")]
    assert len(lines) >= 2 and lines[0].startswith("program (the defaults): ")
    assert sum(ln.endswith("<- chosen") for ln in lines) == 1
    assert any("fuse_attention.enable=False" in ln for ln in lines)
