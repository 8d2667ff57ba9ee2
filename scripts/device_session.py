"""One whole device session (issue 17), in resumable steps of under 10 minutes each.

    python scripts/device_session.py [--out DIR] [--steps a,b,...] [--force] [--dry-run]
                                     [--pack FILE]

Steps, in order (each writes DIR/<step>.log and DIR/<step>.rc; a step whose .rc says 0 is
skipped on the next call unless --force, so a second call after a cut-off resumes):

    versions    nvidia-smi, driver, torch, CuPy, NVRTC, nvcc, ncu: the header of every figure
    preflight   `deplokit preflight`: NVRTC -> cubin -> launch -> DLPack -> RMSNorm vs eager.
                Its first failing line says what to fix before anything else runs.
    gpu_tests   pytest -m gpu (corpus vs eager on host and device inputs, repeat runs bit-identical)
    suite       `deplokit bench --suite llm --resume` in a slice of SUITE_SLICE_S seconds; call
                again until DIR/suite.rc is 0 (every entry measured)
    ncu         Nsight Compute on a 4096² matmul, a projection at seq 128 and attention at
                seq 512 (scripts/ncu_programs.py): speed-of-light, memory and occupancy sections
    calibrate   `deplokit tune --calibrate` on three programs; the fitted constants go into
                DIR/tune_cache.sqlite (commit them with the device they came from)
    notebooks   the notebooks under nbval on the device (their GPU cells run where a GPU is)
    table       a short table of everything above, printed last (DIR/summary.md)

On the device machine only `$OUT` comes back (at most 8 files): run with `--out device_out`
(a folder in the checkout, carried from one call to the next) and `--pack $OUT/session.tar.gz`,
and copy `summary.md` to `$OUT` too. No step needs the network.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

PY = sys.executable
SUITE_SLICE_S = 500            # one command may run 600 s on the device machine; the session 30 min
# one program, so one fit sees every kind of kernel: a projection, a row reduction, elementwise
CALIBRATE_PROGRAM = ("x = torch.randn(128, 2048); w = torch.randn(2048, 2048) / 45; n = torch.randn(2048); "
                     "h = x @ w; F.silu(F.rms_norm(h, (2048,), n, 1e-5)) * h + x")


@dataclass(frozen=True)
class Step:
    name: str
    commands: tuple[tuple[str, ...], ...]   # run one after another; the first failing one ends the step
    timeout_s: int                          # for the whole step
    why: str


def steps(out: Path) -> tuple[Step, ...]:
    ncu_file = str(out / "ncu_{name}.csv")
    cache = str(out / "tune_cache.sqlite")
    return (
        Step("versions", ((PY, __file__, "--versions"),), 30,
             "device, driver and library versions beside every figure"),
        Step("preflight", ((PY, "-m", "deplokit", "preflight"),), 120,
             "the first failing step of NVRTC -> launch -> DLPack -> RMSNorm"),
        Step("gpu_tests", ((PY, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider",
                            "tests/test_cupy_gpu.py"),), 300,
             "every corpus program against eager on the device"),
        Step("suite", ((PY, "-m", "deplokit", "bench", "--suite", "llm", "--resume", "--profile",
                        "--timeout", "240", "--out", str(out / "bench_results")),), SUITE_SLICE_S,
             "the LLM suite against eager and torch.compile, resumable"),
        Step("ncu", tuple(("ncu", "--csv", "--page", "details", "--launch-count", "12",
                           "--section", "SpeedOfLight", "--section", "MemoryWorkloadAnalysis",
                           "--section", "Occupancy", "--section", "LaunchStats",
                           "--log-file", ncu_file.format(name=name),
                           PY, str(Path(__file__).with_name("ncu_programs.py")), name)
                          for name in ("matmul4096", "proj_s128", "attention_s512")), 300,
             "what limits a matmul, a projection and attention (issue, smem, L1/L2, HBM, latency)"),
        Step("calibrate", ((PY, "-m", "deplokit", "tune", "--calibrate", "--budget", "24", "--cache", cache,
                            "-c", CALIBRATE_PROGRAM),), 240,
             "the cost model's constants fitted to measured times"),
        Step("notebooks", ((PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "notebooks/"),), 240,
             "the notebooks' GPU cells (benchmark bars, roofline with measured points)"),
        Step("table", ((PY, __file__, "--table", "--out", str(out)),), 30,
             "a short table of everything above"),
    )


def versions() -> int:
    """Print the versions every figure is recorded with; never fails on a missing piece."""
    def run(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            return f"unavailable ({e.__class__.__name__})"
    print("date:", time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    print("gpu:", run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]))
    print("nvcc:", (run(["nvcc", "--version"]).splitlines() or ["unavailable"])[-1])
    print("ncu:", (run(["ncu", "--version"]).splitlines() or ["unavailable"])[-1])
    for module in ("torch", "cupy", "triton", "cuda.bindings"):
        print(f"{module}:", run([PY, "-c", f"import {module} as m; print(m.__version__)"]) or "unavailable")
    print("torch cuda:", run([PY, "-c", "import torch; print(torch.version.cuda)"]))
    print("nvrtc:", run([PY, "-c", "from cupy.cuda import nvrtc; print('.'.join(map(str, nvrtc.getVersion())))"]))
    return 0


def run_step(step: Step, out: Path, force: bool, dry_run: bool) -> int | None:
    """The step's exit status (None: skipped, already done)."""
    rc_file, log_file = out / f"{step.name}.rc", out / f"{step.name}.log"
    if not force and rc_file.exists() and rc_file.read_text().strip() == "0":
        print(f"[{step.name}] done before; skipped (--force runs it again)")
        return None
    if dry_run:
        print(f"[{step.name}] {step.why} (at most {step.timeout_s} s)")
        for cmd in step.commands:
            print("    " + shlex.join(cmd))
        return None
    deadline = time.monotonic() + step.timeout_s
    rc = 0
    with open(log_file, "w") as log:
        for cmd in step.commands:
            left = deadline - time.monotonic()
            if left <= 5:
                rc = 124
                break
            log.write(f"$ {shlex.join(cmd)}\n")
            log.flush()
            try:
                # SIGINT first: the suite writes what it measured before it exits
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                        env=dict(os.environ, PYTHONUNBUFFERED="1"))
                try:
                    rc = proc.wait(timeout=left)
                except subprocess.TimeoutExpired:
                    proc.send_signal(2)
                    try:
                        proc.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                    rc = 124
            except FileNotFoundError as e:
                log.write(f"not found: {e.filename}\n")
                rc = 127
            if rc != 0:
                break
    rc_file.write_text(f"{rc}\n")
    tail = log_file.read_text().strip().splitlines()[-3:]
    print(f"[{step.name}] rc={rc}" + "".join(f"\n    {line}" for line in tail))
    return rc


# --- the table -------------------------------------------------------------------------------

def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def pytest_counts(log: str) -> str:
    """'3 passed, 1 skipped' from a pytest log's last summary line, or ''."""
    found = re.findall(r"=+ (.*?(?:passed|failed|error|skipped|deselected).*?) in [\d.]+s", log)
    return found[-1] if found else ""


def suite_counts(results: dict) -> dict:
    rows = results.get("rows", [])
    ok = sum(1 for r in rows if r.get("status") == "ok")
    g = results.get("geomean_speedup") or {}
    return {"entries": len(rows), "ok": ok, "vs_eager": g.get("eager"), "vs_compile": g.get("compile")}


NCU_METRICS = ("Compute (SM) Throughput", "Memory Throughput", "DRAM Throughput", "Achieved Occupancy",
               "Registers Per Thread", "Duration")


def ncu_summary(csv_text: str) -> list[tuple[str, str, str]]:
    """(kernel, metric, value) for the metrics that say what limits a kernel."""
    import csv
    lines = [ln for ln in csv_text.splitlines() if ln.startswith('"')]
    rows = []
    for rec in csv.DictReader(lines):
        name = rec.get("Metric Name", "")
        if name in NCU_METRICS:
            unit = rec.get("Metric Unit", "")
            rows.append((rec.get("Kernel Name", "?"), name, f"{rec.get('Metric Value', '')} {unit}".strip()))
    return rows


def table(out: Path) -> str:
    lines = ["# deplokit device session", ""]
    lines += ["```", _read(out / "versions.log").strip(), "```", ""]
    lines.append("| step | exit | what |")
    lines.append("| --- | ---: | --- |")
    for step in steps(out):
        rc = _read(out / f"{step.name}.rc").strip() or "not run"
        detail = ""
        if step.name in ("gpu_tests", "notebooks"):
            detail = pytest_counts(_read(out / f"{step.name}.log"))
        elif step.name == "preflight":
            log = _read(out / "preflight.log").strip().splitlines()
            detail = log[-1] if log else ""
        elif step.name == "suite":
            found = sorted((out / "bench_results").glob("suite_llm_*.json")) if (out / "bench_results").exists() else []
            if found:
                c = suite_counts(json.loads(found[-1].read_text()))
                g = "n/a" if c["vs_eager"] is None else f"{c['vs_eager']:.2f}x"
                detail = f"{c['ok']}/{c['entries']} ok; geomean vs eager {g}"
        elif step.name == "calibrate":
            m = re.findall(r"mean squared log error ([\d.]+) -> ([\d.]+)", _read(out / "calibrate.log"))
            detail = "; ".join(f"log error {a} -> {b}" for a, b in m)
        lines.append(f"| {step.name} | {rc} | {detail} |")
    for f in sorted(out.glob("ncu_*.csv")):
        rows = ncu_summary(_read(f))
        if rows:
            lines += ["", f"## {f.stem}", "", "| kernel | metric | value |", "| --- | --- | --- |"]
            lines += [f"| {k[:60]} | {m} | {v} |" for k, m, v in rows]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="device_out", help="the session's folder (default: %(default)s)")
    ap.add_argument("--steps", default=None, help="comma-separated steps (default: every step)")
    ap.add_argument("--force", action="store_true", help="run steps that finished before")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    ap.add_argument("--pack", default=None, metavar="FILE", help="a .tar.gz of the session folder")
    ap.add_argument("--versions", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--table", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.versions:
        return versions()
    if args.table:
        text = table(out)
        (out / "summary.md").write_text(text)
        print(text, end="")
        return 0
    plan = steps(out)
    wanted = [s for s in plan if args.steps is None or s.name in args.steps.split(",")]
    unknown = set(args.steps.split(",")) - {s.name for s in plan} if args.steps else set()
    if unknown:
        print(f"device_session: unknown step {sorted(unknown)[0]!r}; steps: {', '.join(s.name for s in plan)}",
              file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    worst = 0
    for step in wanted:
        rc = run_step(step, out, args.force, args.dry_run)
        if step.name == "preflight" and rc not in (None, 0):
            print("preflight failed: fix it first (docs/GPU_RUNBOOK.md section 4)", file=sys.stderr)
            worst = rc
            break
        worst = worst or (rc or 0)
    if args.pack and not args.dry_run:
        with tarfile.open(args.pack, "w:gz") as tar:
            tar.add(out, arcname=out.name)
    return worst


if __name__ == "__main__":
    sys.exit(main())
