"""scripts/device_session.py: the one-call device run (issue 28) is planned within the deadline,
bounded step by step, resumable, and its BENCHMARKS.md comes from its results only. Everything
here runs on the host; the device steps themselves need a GPU."""
from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from deplokit.bench.benchmarks_md import OUT_OF_TIME, entry_rows, geomean, render

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module        # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ds():
    return _load("device_session")


def test_the_plan_runs_in_the_issues_order_and_fits_one_device_session(ds):
    assert [s.name for s in ds.PLAN] == ["versions", "preflight", "correctness", "timing", "compile", "extras",
                                         "ncu", "report"]
    total = sum(s.estimate_s for s in ds.PLAN)
    assert total + ds.MACHINE_START_S <= 9 * 60           # machine start + the command: 9 minutes
    assert total <= 520                                    # the documented --deadline
    assert all(s.limit_s <= 560 for s in ds.PLAN)          # one command runs at most 600 s there


def test_dry_run_prints_every_step_with_its_estimate(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "device_session.py"), "--dry-run", "--deadline", "520",
                        "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    for name in ("versions", "preflight", "correctness", "timing", "compile", "ncu", "report"):
        assert f"  {name} " in p.stdout
    assert "--compare eager" in p.stdout and "--compare compile" in p.stdout
    assert "machine start" in p.stdout
    assert not (tmp_path / "o").exists()                   # a dry run writes nothing


def test_the_stratified_subset_has_one_entry_per_op(ds):
    names = ds.suite_names()
    subset = ds.stratified(names)
    ops = {n.split(".")[0] for n in names}
    assert sorted(n.split(".")[0] for n in subset) == sorted(ops)
    assert set(subset) <= set(names)
    assert {"tinyllama", "qwen"} <= {n.split(".")[1] for n in subset}     # both dense models are seen
    assert not any(n.endswith(".bf16") for n in subset)    # FP32 first; bf16 has its own step


def test_bench_dtype_selects_one_precision(capsys):
    from deplokit.cli import main
    assert main(["bench", "--suite", "llm", "--list", "--dtype", "bfloat16", "--filter", "rmsnorm"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:-1]]
    assert names and all(n.endswith(".bf16") for n in names)


def test_a_command_past_its_time_is_stopped_and_a_missing_one_is_127(ds, tmp_path):
    log = open(tmp_path / "log", "w+")
    assert ds.run_cmd([sys.executable, "-c", "import time; time.sleep(60)"], 4, log) == 124
    assert ds.run_cmd(["deplokit-no-such-program"], 10, log) == 127
    assert ds.run_cmd([sys.executable, "-c", "print('hello')"], 30, log) == 0
    log.close()
    assert "hello" in (tmp_path / "log").read_text()


def test_children_keep_the_carried_python_path(ds, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/carried/gpu_pydeps")
    parts = ds.child_env()["PYTHONPATH"].split(":")
    assert parts == [str(ROOT), "/carried/gpu_pydeps"]


def test_no_time_left_marks_the_step_out_of_time(ds, tmp_path):
    clock = ds.Clock(ds.REPORT_RESERVE_S + 1)          # one second past the report's reserve
    state = ds.new_state("x")
    record = ds.run_step(ds.PLAN[3], state, tmp_path, tmp_path, clock, io.StringIO())
    assert record["status"] == "out of time"


def test_losers_are_the_worst_ok_entries(ds):
    rows = [{"name": n, "status": "ok", "report": {"speedup_vs_eager": s}} for n, s in
            (("a", 1.5), ("b", 0.4), ("c", 0.9), ("d", 2.0))] + [{"name": "e", "status": "mismatch"}]
    assert ds.losers({"eager": rows}) == ["b", "c", "a"]


def test_suite_rows_round_trip_through_results_for_resume(ds, tmp_path):
    rows = [{"name": "add.qwen.s32", "op": "add", "status": "ok"},
            {"name": "add.qwen.s128", "op": "add", "status": "mismatch", "check": "max error 3"}]
    state = {"check": rows}
    ds.seed_suite(state, tmp_path, "check")
    from deplokit.bench.resume import previous_rows, still_to_run
    from deplokit.bench.suite import suite_entries
    prev = previous_rows(str(ds._suite_json(tmp_path, "check")), "llm", ds.TARGET, "check")
    todo = [e.name for e in still_to_run(suite_entries("llm"), prev)]
    assert "add.qwen.s32" not in todo and "add.qwen.s128" in todo   # a failed row runs again
    fresh = {}
    ds.harvest_suite(fresh, tmp_path, "check")
    assert fresh["check"] == rows


def test_a_finished_step_is_skipped_on_the_next_call(ds, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    done = {s.name: {"status": "done", "rc": 0} for s in ds.PLAN if s.name not in ("versions", "report")}
    (out / "results.json").write_text(json.dumps({**ds.new_state("earlier"), "steps": done}))
    # every measuring step is done: only versions and the report run (no GPU needed)
    assert ds.main(["--deadline", "60", "--out", str(out), "--work", str(tmp_path / "w")]) == 0
    printed = capsys.readouterr().out
    assert "[preflight] done before; skipped" in printed and "[timing] done before; skipped" in printed
    assert (out / "BENCHMARKS.md").exists()
    assert len(list(out.iterdir())) <= 8


# --- BENCHMARKS.md from a SYNTHETIC results file (made-up numbers; never a committed table) ----

def _report(dk, eager=None, comp=None):
    return {"deplokit_us": dk, "eager_us": eager, "compile_us": comp,
            "speedup_vs_eager": eager / dk if eager else None, "speedup_vs_compile": comp / dk if comp else None,
            "pct_of_peak": 42.0, "bound": "memory"}


SYNTHETIC = {
    "command": "python scripts/device_session.py --deadline 520 --out $OUT", "date": "SYNTHETIC-DATE",
    "versions": {"gpu": "SYNTHETIC GPU", "driver": "999.1", "torch": "9.9", "torch_cuda": "13.0", "cupy": "13.9",
                 "nvrtc": "13.0"},
    "check": [{"name": "a", "status": "ok"}, {"name": "b", "status": "ok"},
              {"name": "c", "status": "mismatch", "check": "device inputs: max abs error 0.5"}],
    "eager": [{"name": "a", "status": "ok", "report": _report(10.0, eager=20.0)},
              {"name": "b", "status": "ok", "report": _report(10.0, eager=5.0)},
              {"name": "c", "status": "mismatch", "check": "max abs error 0.5"}],
    "compile": [{"name": "a", "status": "ok", "report": _report(10.0, comp=30.0)}],
    "bf16": [{"name": "a.bf16", "status": "ok", "report": _report(4.0, eager=8.0, comp=2.0)}],
    "steps": {"timing": {"status": "done"}, "compile": {"status": "out of time"}},
    "gpu_tests": "12 passed, 1 skipped",
}


def test_benchmarks_md_is_computed_from_the_synthetic_results():
    text = render(SYNTHETIC, ["a", "b", "c", "d", "a.bf16"])
    for v in ("SYNTHETIC GPU", "999.1", "torch: 9.9", "CuPy: 13.9", "NVRTC: 13.0", "SYNTHETIC-DATE",
              "--deadline 520"):
        assert v in text
    assert "geomean speedup vs torch eager: 1.00x over 2 entries" in text     # sqrt(2.0 * 0.5)
    assert "vs torch.compile: 3.00x over 1 entries" in text
    assert "| a | 10.00 | 20.00 | 30.00 | 2.00x | 3.00x | 42.0% memory | ok |" in text
    assert f"| b | 10.00 | 5.00 |  | 0.50x |  | 42.0% memory | ok; torch.compile {OUT_OF_TIME} |" in text
    assert "- c: check mismatch: device inputs: max abs error 0.5" in text
    assert f"- d: {OUT_OF_TIME}" in text
    assert "12 passed, 1 skipped" in text
    assert "bf16 geomean speedup vs torch eager: 2.00x over 1 entries; vs torch.compile: 0.50x" in text
    assert "| a.bf16 | 4.00 | 8.00 | 2.00 | 2.00x | 0.50x | 42.0% memory | ok |" in text
    assert render(SYNTHETIC, ["a", "b", "c", "d", "a.bf16"]) == text                   # byte-identical


def test_a_skipped_timing_step_says_why_not_out_of_time():
    state = {"steps": {"timing": {"status": "skipped", "note": "preflight failed"}}}
    assert entry_rows(state, ["a"])[0]["status"] == "not measured: preflight failed"


def test_geomean_ignores_missing_values():
    assert geomean([None, 4.0, 1.0]) == pytest.approx(2.0)
    assert geomean([]) is None


_HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
         '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
_ROW = '"0","1","python","h","merged_matmul","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0","GPU Speed Of Light",'
NCU_CSV = "\n".join(["==PROF== Connected to process 1", _HEAD, _ROW + '"Compute (SM) Throughput","%","81.52"',
                     _ROW + '"L1/TEX Hit Rate","%","3.1"']) + "\n"


def test_ncu_summary_keeps_the_metrics_that_say_what_limits(ds):
    assert ds.ncu_summary(NCU_CSV) == [("merged_matmul", "Compute (SM) Throughput", "81.52 %")]


def test_the_ncu_programs_compile_on_the_host():
    p = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ncu_programs.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    assert p.returncode == 0, p.stderr
    lines = dict(line.split(" ", 1) for line in p.stdout.strip().splitlines())
    assert set(lines) == {"matmul4096", "proj_s128", "attention_s512"}


def test_a_suite_entrys_ncu_inputs_are_its_own():
    nc = _load("ncu_programs")
    xs = nc.inputs("softmax.tinyllama.s32")
    assert len(xs) == 1 and xs[0].std() > 0


def test_the_generate_plan_is_a_session_of_its_own(ds, tmp_path):
    """`--plan generate` (issue 24 part 5): the CUDA-graph gpu tests, then bench_generate on the
    device only, within one device session; the suite's plan is unchanged."""
    assert [s.name for s in ds.GENERATE_PLAN] == ["versions", "preflight", "generate", "report"]
    total = sum(s.estimate_s for s in ds.GENERATE_PLAN)
    assert total + ds.MACHINE_START_S <= 9 * 60 and all(s.limit_s <= 560 for s in ds.GENERATE_PLAN)
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "device_session.py"), "--dry-run", "--plan", "generate",
                        "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "tests/test_cuda_graph.py" in p.stdout and "bench_generate.py --device-only" in p.stdout
    assert "  timing " not in p.stdout and not (tmp_path / "o").exists()
