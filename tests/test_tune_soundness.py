"""Configs sampled from the search space stay correct: each produced kernel runs on the simulator
against torch eager and compiles with nvcc (a handful of configs, so it stays quick)."""
import random

import pytest
from tune_programs import compiled

from deplokit.runtime.nvcc import nvcc_available
from deplokit.tune.space import kernel_spaces


def _sampled(name, count, seed):
    c = compiled(name)
    space = kernel_spaces(c.loop_ir, c.target)[0]
    rng = random.Random(seed)
    leaves = {}
    for _ in range(count * 4):
        _, leaf = space.random_leaf(rng)
        leaves.setdefault(leaf.config, leaf)
        if len(leaves) == count:
            break
    return c, space, list(leaves.values())


@pytest.mark.parametrize("name", ["matmul_odd", "rms_norm_odd", "rms_norm"])
def test_sampled_configs_match_torch_on_the_simulator(name):
    c, space, leaves = _sampled(name, 4, seed=7)
    assert len(leaves) == 4
    for leaf in leaves:
        candidate = c.recompile(leaf.config_for(space.kernel_name))
        assert candidate.tile_ir.kernel(space.kernel_name) == leaf.kernel
        result = candidate.check(backend="sim")
        assert result.ok, f"{dict(leaf.config)}: {result}"


@pytest.mark.skipif(not nvcc_available(), reason="nvcc is not installed")
@pytest.mark.parametrize("name", ["matmul_odd", "rms_norm"])
def test_sampled_configs_compile_with_nvcc_without_spills(name):
    c, space, leaves = _sampled(name, 3, seed=11)
    for leaf in leaves:
        candidate = c.recompile(leaf.config_for(space.kernel_name))
        result = candidate.nvcc()
        stats = result.stats[space.kernel_name]
        assert stats.registers > 0
        assert stats.spills == 0, f"{dict(leaf.config)} spills"


def test_the_tuned_best_is_correct(tmp_path):
    c = compiled("matmul_odd")
    result = c.tune(budget=12, cache=str(tmp_path / "t.db"), ptxas=False)
    assert c.recompile(result.best_config).check(backend="sim").ok
