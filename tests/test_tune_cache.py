"""The SQLite tuning cache: trials are never re-run, Ctrl-C keeps them, a corrupt file is set aside."""
import os
import sqlite3

import pytest
from tune_programs import compiled

from deplokit.runtime.nvcc import nvcc_available
from deplokit.tune.cache import CacheError, TuneCache, config_key, default_cache_path
from deplokit.tune.space import kernel_spaces


def test_default_path_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOKIT_CACHE_DIR", str(tmp_path / "here"))
    assert default_cache_path() == str(tmp_path / "here" / "tune.db")
    monkeypatch.delenv("DEPLOKIT_CACHE_DIR")
    assert default_cache_path() == os.path.join(os.path.expanduser("~"), ".cache", "deplokit", "tune.db")


def test_record_and_lookup_round_trip_knob_values(tmp_path):
    config = (("004_cooperative_reduce.lanes", 512), ("007_stage_inputs.stage", False),
              ("008_register_tile.layout", "strided"))
    with TuneCache(str(tmp_path / "t.db")) as cache:
        assert cache.lookup("k", "sm_90", "model", config) is None
        cache.record("k", "sm_90", "model", config, 3.5, True)
        cache.record("k", "sm_90", "model", (("004_cooperative_reduce.lanes", 64),), None, False, "too small")
    with TuneCache(str(tmp_path / "t.db")) as cache:
        got = cache.lookup("k", "sm_90", "model", dict(reversed(config)))      # order does not matter
        assert got.cost_us == 3.5 and got.ok and got.config == tuple(sorted(config))
        assert cache.lookup("k", "sm_80", "model", config) is None             # keyed by target
        assert [t.ok for t in cache.trials("k", "sm_90", "model")] == [True, False]
        assert cache.best("k", "sm_90")[0] == "model"
    assert config_key({"b": 1, "a": True}) == config_key({"a": True, "b": 1})


def test_a_second_run_reads_every_trial_back(tmp_path):
    c = compiled("softmax")
    path = str(tmp_path / "t.db")
    first = c.tune(budget=6, cache=path, ptxas=False)
    second = c.tune(budget=6, cache=path, ptxas=False)
    assert not any(t.cached for t in first.history)
    assert all(t.cached for t in second.history)
    assert [(t.config, t.cost_us) for t in second.history] == [(t.config, t.cost_us) for t in first.history]


def test_an_interrupted_run_keeps_its_trials_and_the_next_resumes(tmp_path):
    # one program (split_reduce held): every trial is the matmul kernel's (test_tune_cli
    # interrupts the program-level choices)
    c = compiled("matmul_odd").recompile({"split_reduce.splits": 1})
    path = str(tmp_path / "t.db")

    def interrupt(trial):
        if trial.index == 4:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        c.tune(budget=10, cache=path, listener=interrupt, ptxas=False)
    with TuneCache(path) as cache:
        kernel = kernel_spaces(c.loop_ir, c.target)[0].key
        assert len(cache.trials(kernel, "sm_90", "model")) == 5
    resumed = c.tune(budget=10, cache=path, ptxas=False)
    assert [t.cached for t in resumed.history] == [True] * 5 + [False] * 5
    fresh = c.tune(budget=10, cache=str(tmp_path / "fresh.db"), ptxas=False)
    assert [t.config for t in resumed.history] == [t.config for t in fresh.history]


def test_a_corrupt_cache_is_set_aside_and_rebuilt(tmp_path):
    path = tmp_path / "t.db"
    path.write_bytes(b"this is not a database" * 100)
    c = compiled("softmax")
    with TuneCache(str(path)) as cache:
        assert any("unreadable" in n for n in cache.notes)
        result = c.tune(budget=2, cache=cache, ptxas=False)
    assert (tmp_path / "t.db.corrupt").read_bytes().startswith(b"this is not")
    assert len(result.history) == 2
    with TuneCache(str(path)) as cache:
        assert not cache.notes


def test_a_cache_of_another_schema_is_set_aside(tmp_path):
    path = str(tmp_path / "t.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES ('schema', '999')")
    conn.commit()
    conn.close()
    with TuneCache(path) as cache:
        assert cache.notes and os.path.exists(path + ".corrupt")


def test_looking_up_never_creates_a_cache(tmp_path):
    cache = TuneCache(str(tmp_path / "none.db"), create=False)
    assert cache.lookup("k", "sm_90", "model", ()) is None
    assert cache.best("k", "sm_90") is None
    assert not (tmp_path / "none.db").exists()


def test_a_folder_in_place_of_the_cache_is_a_clear_error(tmp_path):
    with pytest.raises(CacheError, match="is a folder"):
        TuneCache(str(tmp_path))


@pytest.mark.skipif(not nvcc_available(), reason="nvcc is not installed")
def test_ptxas_statistics_are_kept_and_never_recompiled(tmp_path, monkeypatch):
    import deplokit.runtime.nvcc as nvcc
    from deplokit.tune.objective import ModelObjective

    c = compiled("softmax")
    space = kernel_spaces(c.loop_ir, c.target)[0]
    leaf = space.default_leaf()
    with TuneCache(str(tmp_path / "t.db")) as cache:
        first = ModelObjective(c.target, cache, ptxas=True)(space, leaf)
        assert cache.conn.execute("SELECT COUNT(*) FROM ptxas").fetchone()[0] == 1
    nvcc.clear_cache()

    def no_nvcc(*a, **k):
        raise AssertionError("nvcc ran again")
    monkeypatch.setattr(nvcc, "compile_cuda", no_nvcc)
    with TuneCache(str(tmp_path / "t.db")) as cache:
        assert ModelObjective(c.target, cache, ptxas=True)(space, leaf) == first
