"""The knob tree of a kernel (deplokit/tune/space.py): read from the passes, pruned by them,
and every leaf a config that deplokit.compile rebuilds exactly."""
import random

import pytest
from tune_programs import compiled

import deplokit
from deplokit.errors import DeplokitError
from deplokit.passes.schedule import SCHEDULE
from deplokit.tune.space import KernelSpace, kernel_spaces

DOMAINS = {f"{m.name}.{k.name}": k.domain for m in SCHEDULE for k in m.knobs}


def _space(name):
    c = compiled(name)
    return c, kernel_spaces(c.loop_ir, c.target)[0]


@pytest.mark.parametrize("name", ["rms_norm", "softmax", "matmul_odd"])
def test_default_leaf_is_what_compile_builds(name):
    c, space = _space(name)
    leaf = space.default_leaf()
    assert leaf.kernel == c.tile_ir.kernel(space.kernel_name)


@pytest.mark.parametrize("name", ["rms_norm", "rms_norm_odd", "softmax"])
def test_leaves_are_distinct_kernels_with_complete_configs(name):
    _, space = _space(name)
    leaves = [leaf for _, leaf in space.leaves()]
    assert 2 <= len(leaves) == space.size()
    assert len({leaf.kernel.body for leaf in leaves}) == len(leaves)      # pruning merged duplicates
    assert len({leaf.config for leaf in leaves}) == len(leaves)
    for leaf in leaves:
        assert [k for k, _ in leaf.config] == list(DOMAINS)               # every knob, in pass order
        assert all(v in DOMAINS[k] for k, v in leaf.config)


def test_pruning_is_far_smaller_than_the_cross_product():
    _, space = _space("rms_norm")
    assert space.size() * 1000 < space.raw_combinations()


@pytest.mark.parametrize("name", ["rms_norm_odd", "matmul_odd"])
def test_compiling_a_leaf_config_rebuilds_that_kernel(name):
    c, space = _space(name)
    rng = random.Random(1)
    for _ in range(3):
        _, leaf = space.random_leaf(rng)
        again = c.recompile(leaf.config_for(space.kernel_name))
        assert again.tile_ir.kernel(space.kernel_name) == leaf.kernel


def test_leaf_of_follows_choices_and_rejects_bad_paths():
    _, space = _space("rms_norm")
    path, leaf = next(iter(space.leaves()))
    assert space.leaf_of(path) == leaf == space.default_leaf()
    with pytest.raises(DeplokitError):
        space.leaf_of(path[:-1])


def test_structurally_equal_kernels_share_one_space():
    c = compiled("two_softmaxes")
    assert [k.name for k in c.loop_ir.kernels] == ["merged_softmax", "merged_softmax_1"]
    spaces = kernel_spaces(c.loop_ir, c.target)
    assert [s.kernel_name for s in spaces] == ["merged_softmax"]
    other = KernelSpace(c.loop_ir, "merged_softmax_1", c.target)
    assert other.key == spaces[0].key


def test_a_config_outside_a_knob_domain_is_refused():
    c = compiled("rms_norm")
    with pytest.raises(DeplokitError, match="outside its domain"):
        c.recompile({"004_cooperative_reduce.lanes": 100})
    with pytest.raises(DeplokitError, match="outside its domain"):
        deplokit.compile(c.source, *c.example_inputs, config={"merged_rms_norm:004_cooperative_reduce.lanes": 3})


@pytest.mark.parametrize("name", ["rms_norm", "softmax"])
def test_estimated_size_is_near_the_count_and_repeatable(name):
    _, space = _space(name)
    exact = space.size()
    estimate = space.estimate_size(probes=300, seed=1)
    assert estimate == space.estimate_size(probes=300, seed=1)
    assert 0.7 * exact <= estimate <= 1.3 * exact


def test_a_second_space_of_the_same_kernel_reuses_the_pass_applications(monkeypatch):
    # the notebook's space table and the tune after it expand the same tree once
    c, first = _space("rms_norm")
    leaf = first.default_leaf()
    import deplokit.tune.space as space_module
    calls = []
    real = space_module.with_workspaces         # called once per pass application
    monkeypatch.setattr(space_module, "with_workspaces", lambda *a: calls.append(1) or real(*a))
    again = kernel_spaces(c.loop_ir, c.target)[0]
    assert again is not first and again.default_leaf() == leaf
    assert calls == []
