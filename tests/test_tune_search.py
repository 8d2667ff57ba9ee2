"""SP-MCTS and random search over a kernel's knob tree, and the tuner around them."""
import pytest
from tune_programs import compiled

from deplokit.errors import DeplokitError
from deplokit.tune.mcts import SPMCTS
from deplokit.tune.objective import ModelObjective
from deplokit.tune.random_search import StopSearch, random_search
from deplokit.tune.space import kernel_spaces


def _space(name):
    c = compiled(name)
    return c, kernel_spaces(c.loop_ir, c.target)[0]


class Counting:
    """An objective over a space's leaves that records each call; stops after `budget`."""

    def __init__(self, space, budget=10_000):
        self.model = ModelObjective(space.target, ptxas=False)
        self.space, self.budget, self.calls = space, budget, []

    def __call__(self, leaf):
        if len(self.calls) >= self.budget:
            raise StopSearch
        self.calls.append(leaf.config)
        return self.model(self.space, leaf)


@pytest.mark.parametrize("name", ["rms_norm", "softmax"])
def test_mcts_with_budget_to_spare_evaluates_every_leaf_exactly_once(name):
    _, space = _space(name)
    size = space.size()
    ev = Counting(space)
    SPMCTS(space, seed=3).run(ev)            # returns when the whole tree is closed
    assert len(ev.calls) == len(set(ev.calls)) == size


def test_frequent_restarts_still_close_the_tree():
    # after every leaf is evaluated each iteration re-draws an old one: were those counted
    # as stale, a restart every few iterations would drop the tree before it closed, forever
    _, space = _space("rms_norm")
    ev = Counting(space)
    search = SPMCTS(space, seed=3, restart_after=4)
    search.run(ev, max_iterations=20_000)
    assert search.exhausted and search.restarts > 0
    assert len(ev.calls) == len(set(ev.calls)) == space.size()


def test_mcts_stops_on_budget_and_finds_the_exhaustive_best():
    _, space = _space("rms_norm")
    model = ModelObjective(space.target, ptxas=False)
    best = min(model(space, leaf) for _, leaf in space.leaves())
    ev = Counting(space, budget=20)
    with pytest.raises(StopSearch):
        SPMCTS(space, seed=0).run(ev)
    assert len(ev.calls) == 20
    assert min(model(space, l) for _, l in space.leaves() if l.config in set(ev.calls)) <= best * 1.05


def test_random_search_draws_distinct_leaves():
    _, space = _space("softmax")
    ev = Counting(space, budget=15)
    with pytest.raises(StopSearch):
        random_search(space, ev, seed=1)
    assert len(ev.calls) == len(set(ev.calls)) == 15


def test_tune_returns_the_history_and_a_config_that_compiles(tmp_path):
    c = compiled("rms_norm_odd")
    seen = []
    result = c.tune(budget=8, cache=str(tmp_path / "t.db"), listener=seen.append, ptxas=False)
    assert seen == list(result.programs) + list(result.history)    # the program-level choices first
    assert len(result.history) == 8
    assert [t.index for t in result.history] == list(range(8))
    assert result.history[0].default and result.default is result.history[0]
    bests = [t.best_us for t in result.history]
    assert bests == sorted(bests, reverse=True)                 # best so far never gets worse
    assert result.best.cost_us == min(t.cost_us for t in result.history if t.ok)
    assert result.best.cost_us <= result.default.cost_us
    again = c.recompile(result.best_config)
    name = c.loop_ir.kernels[0].name
    assert again.check(backend="sim").ok
    assert again.tile_ir.kernel(name).knobs == tuple(
        (k, v) for k, v in result.best.config if k in dict(again.tile_ir.kernel(name).knobs))


def test_structurally_equal_kernels_are_tuned_once_and_configured_together(tmp_path):
    c = compiled("two_softmaxes")
    result = c.tune(budget=4, cache=str(tmp_path / "t.db"), ptxas=False)
    assert {t.kernel for t in result.history} == {"merged_softmax"}
    assert result.kernels == (("merged_softmax", ("merged_softmax", "merged_softmax_1")),)
    cfg = result.best_config
    assert any(k.startswith("merged_softmax_1:") for k in cfg) and any(k.startswith("merged_softmax:") for k in cfg)
    assert c.recompile(cfg).check(backend="sim").ok


def test_patience_stops_a_search_early(tmp_path):
    c = compiled("matmul_odd")
    result = c.tune(budget=60, cache=str(tmp_path / "t.db"), ptxas=False, patience=3)
    assert 4 <= len(result.history) < 60


def test_random_search_through_the_tuner(tmp_path):
    c = compiled("softmax")
    result = c.tune(budget=6, search="random", cache=str(tmp_path / "t.db"), ptxas=False)
    assert len(result.history) == 6
    assert len({t.config for t in result.history}) == 6


@pytest.mark.parametrize("kwargs, needle", [({"budget": 0}, "budget"), ({"search": "grid"}, "unknown search"),
                                            ({"objective": "fast"}, "unknown objective")])
def test_bad_tune_arguments_are_clear_errors(tmp_path, kwargs, needle):
    c = compiled("softmax")
    with pytest.raises(DeplokitError, match=needle):
        c.tune(cache=str(tmp_path / "t.db"), ptxas=False, **kwargs)


def test_the_surrogate_predicts_from_near_neighbours():
    from deplokit.tune.surrogate_search import predict
    seen = {(("a", 1), ("b", 1)): 0.0, (("a", 2), ("b", 2)): 10.0}
    near_first, u_near = predict((("a", 1), ("b", 1)), seen)
    between, _ = predict((("a", 1), ("b", 2)), seen)
    assert near_first < between < 10.0 and between == pytest.approx(5.0)
    _, u_far = predict((("a", 3), ("b", 3)), seen)
    assert u_far > u_near              # farther from anything seen: less sure


def test_surrogate_search_draws_distinct_leaves_and_is_seeded():
    _, space = _space("softmax")
    runs = []
    for _ in range(2):
        ev = Counting(space, budget=12)
        from deplokit.tune.surrogate_search import surrogate_search
        try:
            surrogate_search(space, ev, seed=5)
        except StopSearch:
            pass
        runs.append(ev.calls)
    assert len(runs[0]) == len(set(runs[0])) == 12
    assert runs[0] == runs[1]


def test_surrogate_search_through_the_tuner_never_loses_to_its_start(tmp_path):
    c = compiled("softmax")
    result = c.tune(budget=10, search="surrogate", cache=str(tmp_path / "t.db"), ptxas=False)
    assert len(result.history) == 10 and len({t.config for t in result.history}) == 10
    assert result.best.cost_us <= result.default.cost_us


def test_tune_starts_from_the_config_the_compilation_was_made_with(tmp_path):
    """Trial 0 of a kernel is the schedule `c` holds, not the passes' heuristics (issue 27)."""
    import deplokit
    from deplokit.tune.space import kernel_spaces as spaces_of
    c = compiled("softmax")
    (space,) = spaces_of(c.loop_ir, c.target)
    default = dict(space.default_leaf().config)["005_blockify_launch.block_threads"]
    other = next(v for v in (64, 128, 256, 512, 1024) if v != default)
    mine = deplokit.compile(c.source, *c.example_inputs, config={"005_blockify_launch.block_threads": other})
    assert mine.config == {"005_blockify_launch.block_threads": other}
    result = mine.tune(budget=3, cache=str(tmp_path / "t.db"), ptxas=False)
    first = dict(result.history[0].config)
    assert result.history[0].default and first["005_blockify_launch.block_threads"] == other
    mine.recompile(result.best_config)                                                # the best config compiles
    assert any(t.config != result.history[0].config for t in result.history[1:])    # and it still searches
