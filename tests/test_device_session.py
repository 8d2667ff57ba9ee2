"""scripts/device_session.py: the one-shot device run (issue 17) is planned, resumable and
summarised correctly. Everything here runs on the host; the device steps themselves need a GPU."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_every_step_fits_a_device_command_and_the_session(ds, tmp_path):
    plan = ds.steps(tmp_path)
    names = [s.name for s in plan]
    assert names == ["versions", "preflight", "gpu_tests", "suite", "ncu", "calibrate", "notebooks", "table"]
    assert all(s.timeout_s <= 560 for s in plan)            # one command runs at most 600 s there
    assert sum(s.timeout_s for s in plan) <= 30 * 60          # the session's device time
    for s in plan:                                            # every output lands in the session folder
        for cmd in s.commands:
            for arg in cmd:
                if arg.startswith("/") and ("csv" in arg or "sqlite" in arg or "bench_results" in arg):
                    assert arg.startswith(str(tmp_path))


def test_ncu_profiles_the_three_kernels_issue_17_names(ds, tmp_path):
    ncu = next(s for s in ds.steps(tmp_path) if s.name == "ncu")
    programs = [cmd[-1] for cmd in ncu.commands]
    assert programs == ["matmul4096", "proj_s128", "attention_s512"]
    assert all(cmd[0] == "ncu" and "--log-file" in cmd for cmd in ncu.commands)


def test_a_finished_step_is_skipped_and_a_failed_one_runs_again(ds, tmp_path):
    ok = ds.Step("ok", ((sys.executable, "-c", "print('hello')"),), 30, "")
    bad = ds.Step("bad", ((sys.executable, "-c", "import sys; sys.exit(3)"),
                          (sys.executable, "-c", "print('never')")), 30, "")
    assert ds.run_step(ok, tmp_path, force=False, dry_run=False) == 0
    assert "hello" in (tmp_path / "ok.log").read_text()
    assert ds.run_step(ok, tmp_path, force=False, dry_run=False) is None      # resumed: skipped
    assert ds.run_step(ok, tmp_path, force=True, dry_run=False) == 0
    assert ds.run_step(bad, tmp_path, force=False, dry_run=False) == 3
    assert "never" not in (tmp_path / "bad.log").read_text()                  # the first failure ends the step
    assert ds.run_step(bad, tmp_path, force=False, dry_run=False) == 3        # not skipped: it failed


def test_a_step_past_its_time_is_stopped_with_124(ds, tmp_path):
    slow = ds.Step("slow", ((sys.executable, "-c", "import time; time.sleep(60)"),), 6, "")
    assert ds.run_step(slow, tmp_path, force=False, dry_run=False) == 124
    assert (tmp_path / "slow.rc").read_text().strip() == "124"


def test_a_missing_program_is_127_not_a_traceback(ds, tmp_path):
    step = ds.Step("nothere", (("deplokit-no-such-program",),), 30, "")
    assert ds.run_step(step, tmp_path, force=False, dry_run=False) == 127


NCU_CSV = '''==PROF== Connected to process 1
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python","h","merged_matmul","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Compute (SM) Throughput","%","81.52"
"0","1","python","h","merged_matmul","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0","GPU Speed Of Light Throughput","DRAM Throughput","%","12.05"
"0","1","python","h","merged_matmul","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0","GPU Speed Of Light Throughput","L1/TEX Hit Rate","%","3.1"
'''


def test_the_table_reads_every_step(ds, tmp_path):
    (tmp_path / "versions.log").write_text("gpu: NVIDIA H100 80GB HBM3, 580.1, 81559 MiB\n")
    (tmp_path / "versions.rc").write_text("0\n")
    (tmp_path / "gpu_tests.log").write_text("....F\n=========== 1 failed, 4 passed, 2 skipped in 80.12s ===========\n")
    (tmp_path / "gpu_tests.rc").write_text("1\n")
    (tmp_path / "calibrate.log").write_text("calibrated on 24 timed schedules: mean squared log error 1.250 -> 0.310\n")
    results = tmp_path / "bench_results"
    results.mkdir()
    rows = [{"name": "a", "status": "ok"}, {"name": "b", "status": "mismatch"}, {"name": "c", "status": "ok"}]
    (results / "suite_llm_sm_90.json").write_text(json.dumps(
        {"rows": rows, "geomean_speedup": {"eager": 0.87, "compile": 0.5}}))
    (tmp_path / "ncu_matmul4096.csv").write_text(NCU_CSV)
    text = ds.table(tmp_path)
    assert "NVIDIA H100" in text
    assert "| gpu_tests | 1 | 1 failed, 4 passed, 2 skipped |" in text
    assert "| suite | not run | 2/3 ok; geomean vs eager 0.87x |" in text
    assert "log error 1.250 -> 0.310" in text
    assert "| merged_matmul | Compute (SM) Throughput | 81.52 % |" in text
    assert "L1/TEX Hit Rate" not in text                          # only the metrics that say what limits
    assert "| ncu | not run |" in text


def test_an_unknown_step_is_one_line(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "device_session.py"), "--out", str(tmp_path),
                        "--steps", "suite,benchmark"], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "unknown step 'benchmark'" in p.stderr


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
    assert all("matmul" in lines[k] for k in ("matmul4096", "proj_s128"))


def test_the_inputs_are_never_zeros():
    nc = _load("ncu_programs")
    for name in nc.PROGRAMS:
        if name == "matmul4096":
            continue                      # 128 MiB of inputs: the generator is the same code path
        xs = nc.inputs(name)
        assert all(x.abs().sum() > 0 and x.std() > 0 for x in xs)
