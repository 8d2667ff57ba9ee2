"""`deplokit tune`, and compile / run picking up the tuned configs."""
import re
import os

import pytest

from deplokit.cli import main
from deplokit.runtime.device import gpu_available

SOFTMAX = "nn.Softmax(dim=-1)(torch.randn(3,5,1000))"


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, out, err, needle):
    assert code == 2
    assert "Traceback" not in err + out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("deplokit: error: ") and needle in lines[0], err


def test_tune_prints_a_table_and_compile_uses_the_result(capsys, tmp_path):
    cache = str(tmp_path / "t.db")
    code, out, err = run_cli(capsys, "tune", "-c", SOFTMAX, "--budget", "6", "--cache", cache)
    assert code == 0, err
    header, row = out.splitlines()[:2]
    assert header.split()[:2] == ["kernel", "trials"] and "speedup" in header
    assert row.startswith("merged_softmax") and row.split()[1] == "6"
    assert "6 trials (6 new, 0 from the cache)" in err
    code, out, err = run_cli(capsys, "compile", "-c", SOFTMAX, "--ir", "tile", "--cache", cache)
    assert code == 0
    assert f"using tuned config from {cache} for 1 kernel" in err
    code, out2, err = run_cli(capsys, "compile", "-c", SOFTMAX, "--ir", "tile", "--cache", cache, "--no-tuned")
    assert code == 0 and "using tuned" not in err
    code, out, err = run_cli(capsys, "run", "-c", SOFTMAX, "--cache", cache)
    assert code == 0 and "using tuned config" in err and "ok: backend=sim" in out


def test_tune_verbose_lists_each_trial_and_every_knob(capsys, tmp_path):
    code, out, err = run_cli(capsys, "tune", "-v", "-c", SOFTMAX, "--budget", "3", "--cache", str(tmp_path / "t.db"))
    assert code == 0
    assert "trial 0: merged_softmax:" in err and "the start (the config compiled with)" in err
    assert "016_mark_unroll.max_trip=" in out


def test_tune_verbose_names_the_knobs_tried_and_only_those_in_effect(capsys, tmp_path):
    """RMSNorm(37): each trial line names the knobs it changed; the summary lists only knobs
    the kernel depends on (no matmul knob, and not 005's block_threads: 004 shaped the block)."""
    code, out, err = run_cli(capsys, "tune", "-v", "-c", "nn.RMSNorm(37)(torch.randn(1,32,37))", "--budget", "4",
                             "--cache", str(tmp_path / "t.db"))
    assert code == 0
    trials = [line for line in err.splitlines() if line.startswith("trial ")]
    assert len(trials) == 4 and all("=" in line for line in trials[1:])
    knobs = out.splitlines()[1].split("x  ", 1)[1]
    assert "004_cooperative_reduce.lanes=" in knobs
    assert not any(k in knobs for k in ("002_", "003_", "008_", "block_threads", "thread_shape"))


def test_the_default_cache_is_the_environments_folder(capsys):
    code, _, err = run_cli(capsys, "tune", "-c", SOFTMAX, "--budget", "2")
    assert code == 0
    path = os.path.join(os.environ["DEPLOKIT_CACHE_DIR"], "tune.db")
    assert os.path.exists(path) and path in err
    code, _, err = run_cli(capsys, "compile", "-c", SOFTMAX)
    assert f"using tuned config from {path}" in err


def test_compile_without_a_cache_says_nothing_and_creates_none(capsys, tmp_path):
    code, _, err = run_cli(capsys, "compile", "-c", SOFTMAX, "--cache", str(tmp_path / "none.db"))
    assert code == 0 and err == ""
    assert not (tmp_path / "none.db").exists()


def test_compile_survives_a_corrupt_cache(capsys, tmp_path):
    cache = tmp_path / "t.db"
    cache.write_bytes(b"garbage" * 1000)
    code, out, err = run_cli(capsys, "compile", "-c", SOFTMAX, "--cache", str(cache))
    assert code == 0 and "__global__" in out
    assert "warning" in err and "unreadable" in err and "Traceback" not in err
    assert (tmp_path / "t.db.corrupt").exists()


@pytest.mark.parametrize("argv, needle", [
    (["--budget", "0"], "--budget must be at least 1"),
    (["--cache", "{tmp}"], "is a folder"),
])
def test_bad_tune_input_is_one_line(capsys, tmp_path, argv, needle):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    one_line_error(*run_cli(capsys, "tune", "-c", SOFTMAX, *argv), needle)


@pytest.mark.skipif(gpu_available(), reason="checks the message given without a GPU")
@pytest.mark.parametrize("extra", [["--objective", "gpu"], ["--calibrate"]])
def test_gpu_work_without_a_gpu_is_a_clear_error(capsys, tmp_path, extra):
    one_line_error(*run_cli(capsys, "tune", "-c", SOFTMAX, "--cache", str(tmp_path / "t.db"), *extra),
                   "needs a CUDA device")


def test_gpu_objective_without_a_gpu_raises_device_unavailable(tmp_path):
    from tune_programs import compiled

    from deplokit.runtime.device import DeviceUnavailableError
    if gpu_available():
        pytest.skip("a GPU is present")
    with pytest.raises(DeviceUnavailableError, match="the gpu objective needs a CUDA device"):
        compiled("softmax").tune(objective="gpu", cache=str(tmp_path / "t.db"))


def test_ctrl_c_keeps_finished_trials_and_the_next_run_resumes(capsys, tmp_path, monkeypatch):
    from deplokit.tune.objective import ModelObjective
    cache = str(tmp_path / "t.db")
    real = ModelObjective.__call__
    calls = []

    def interrupted(self, space, leaf):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(leaf.config)
        return real(self, space, leaf)
    monkeypatch.setattr(ModelObjective, "__call__", interrupted)
    code, out, err = run_cli(capsys, "tune", "-c", SOFTMAX, "--budget", "6", "--cache", cache)
    assert code == 130 and "interrupted" in err and "Traceback" not in err and out == ""
    import sqlite3
    with sqlite3.connect(cache) as db:
        kept = db.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
    assert kept == 4            # the three kernel trials and the unsplit program's own
    monkeypatch.setattr(ModelObjective, "__call__", real)
    code, out, err = run_cli(capsys, "tune", "-c", SOFTMAX, "--budget", "6", "--cache", cache)
    assert code == 0
    # the three trials before Ctrl-C priced the program-level options (softmax unsplit, then two
    # kernels of a split one): the kernel's default is read back, the rest of its search is new
    assert "6 trials (5 new, 1 from the cache)" in err
    assert len(calls) == 3
    # issue 29: every trial the interrupted run finished is read back, none run again
    told = re.search(r"all told (\d+) run and (\d+) read back", err)
    assert told and int(told.group(2)) == kept, err.splitlines()[-1]


def test_a_stale_cached_config_is_ignored_with_a_warning(capsys, tmp_path):
    from tune_programs import compiled

    from deplokit.tune.cache import TuneCache
    from deplokit.tune.space import kernel_spaces
    c = compiled("softmax")
    key = kernel_spaces(c.loop_ir, c.target)[0].key
    with TuneCache(str(tmp_path / "t.db")) as cache:
        cache.record(key, "sm_90", "model", {"099_gone.knob": 1}, 1.0, True)
    code, out, err = run_cli(capsys, "compile", "-c", SOFTMAX, "--cache", str(tmp_path / "t.db"))
    assert code == 0 and "__global__" in out
    assert "warning: ignored the cached config of merged_softmax" in err and "using tuned" not in err


def test_compile_with_tuned_configs_lowers_the_program_once(capsys, tmp_path, monkeypatch):
    import deplokit.compilation

    cache = str(tmp_path / "t.db")
    assert run_cli(capsys, "tune", "-c", SOFTMAX, "--budget", "2", "--cache", cache)[0] == 0
    runs = []
    real = deplokit.compilation.lower
    monkeypatch.setattr(deplokit.compilation, "lower", lambda *a, **k: runs.append(1) or real(*a, **k))
    code, out, err = run_cli(capsys, "compile", "-c", SOFTMAX, "--ir", "tile", "--cache", cache)
    assert code == 0 and "using tuned config" in err and len(runs) == 1
