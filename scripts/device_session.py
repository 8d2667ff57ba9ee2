"""The whole device session (issue 28) in one command under a global deadline.

    python scripts/device_session.py --deadline 520 --out DIR [--results FILE] [--dry-run]

A lent device gives 15 minutes in all, machine start included, and one command at most 10; so
this runs once, for at most --deadline seconds, and stops cleanly then. Steps, in order; each is
bounded by min(its own limit, the time left to the deadline), and whatever finished is written to
DIR as it goes:

    versions     device, driver, torch, CuPy, NVRTC, nvcc, ncu (the header of every figure)
    preflight    `deplokit preflight`; if it fails nothing else can run, and it says why
    correctness  every corpus program (pytest -m gpu) and every suite entry against eager on the
                 device, from host and from device inputs; no timing
    timing       every suite entry against eager (`deplokit bench --suite llm --compare eager`)
    compile      torch.compile timing: a stratified subset (one entry per op) first, then the rest
    extras       generation tokens/s (benchmarks/bench_generate.py) and bf16 entries, where present
    (--plan generate: versions, preflight, generate, report: the CUDA-graph decode's gpu tests
    and benchmarks/bench_generate.py --device-only, a session of its own)
    ncu          Nsight Compute on the entries that lose most to eager
    report       BENCHMARKS.md from whatever finished (deplokit/bench/benchmarks_md.py)

DIR holds at most five files: results.json (every row and step status; a later call with the
same DIR, or with --results pointing at a carried-back results.json, skips what finished and
measures what is missing), session.log, BENCHMARKS.md, ncu.csv, summary line on stdout. The
suite's own per-run files go to --work (outside DIR: the device returns at most 8 files).
No step needs the network. docs/device_session.md gives the one `run` command.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deplokit.bench.benchmarks_md import render  # noqa: E402

PY = sys.executable
TARGET = "sm_90"
SESSION_S = 9 * 60               # the one device command, machine start included
MACHINE_START_S = 90             # a machine starts in 1-2 minutes; the plan keeps this margin
REPORT_RESERVE_S = 8             # always left for results.json and BENCHMARKS.md
NCU_KERNELS = 3
NCU_METRICS = ("Compute (SM) Throughput", "Memory Throughput", "DRAM Throughput", "Achieved Occupancy",
               "Registers Per Thread", "Duration")


@dataclass(frozen=True)
class Step:
    name: str
    estimate_s: int      # what the plan expects on an H100 (the deadline, not this, bounds it)
    limit_s: int         # never more than this, even with time left
    why: str


PLAN = (
    Step("versions", 10, 40, "device, driver and library versions beside every figure"),
    Step("preflight", 30, 120, "NVRTC -> cubin -> launch -> DLPack -> RMSNorm vs eager"),
    Step("correctness", 110, 260, "every corpus program and suite entry vs eager, host and device inputs"),
    Step("timing", 130, 300, "every FP32 suite entry timed against eager"),
    Step("compile", 70, 400, "torch.compile timing: one entry per op first, then the rest"),
    Step("extras", 20, 120, "generation tokens/s and the bf16 entries (eager and torch.compile), where they exist"),
    Step("ncu", 40, 150, "Nsight Compute on the entries that lose most"),
    Step("report", 2, 30, "BENCHMARKS.md from whatever finished"),
)
# `--plan generate`: a session of its own for issue 24 part 5 (SmolLM2's load and the two
# compiles take minutes of host time: no room in the suite session). tokens/s at batch 1 of
# deplokit's CUDA-graph decode against transformers eager and torch.compile + static cache.
GENERATE_PLAN = (
    Step("versions", 10, 40, "device, driver and library versions beside every figure"),
    Step("preflight", 30, 120, "NVRTC -> cubin -> launch -> DLPack -> RMSNorm vs eager"),
    Step("generate", 330, 480, "CUDA-graph decode vs loop (pytest -m gpu), then SmolLM2 tokens/s: deplokit "
                                "(graph) vs transformers eager vs torch.compile + static cache"),
    Step("report", 2, 30, "BENCHMARKS.md from whatever finished"),
)
PLANS = {"suite": PLAN, "generate": GENERATE_PLAN}


def suite_names() -> list[str]:
    from deplokit.bench.suite import suite_entries
    return [e.name for e in suite_entries("llm")]


def stratified(names) -> list[str]:
    """One FP32 entry per op at seq 128 (the models taken in turn), so a short budget still sees
    every kind of kernel against torch.compile."""
    by_op: dict[str, list[str]] = {}
    for n in (n for n in names if not n.endswith(".bf16")):
        by_op.setdefault(n.split(".")[0], []).append(n)
    out = []
    for i, (op, group) in enumerate(by_op.items()):
        mid = [n for n in group if n.endswith(".s128")] or group
        models = sorted({n.split(".")[1] for n in mid})
        want = models[i % len(models)]
        out.append(next(n for n in mid if n.split(".")[1] == want))
    return out


# --- the session's state ---------------------------------------------------------------------

def new_state(command: str) -> dict:
    return {"command": command, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "versions": {}, "steps": {}, "check": [], "eager": [], "compile": [], "bf16": [],
            "gpu_tests": "", "generate": {}, "ncu": []}


def load_state(out: Path, carried: str | None, command: str) -> dict:
    state = new_state(command)
    for path in (Path(carried) if carried else None, out / "results.json"):
        if path is not None and path.exists():
            state.update(json.loads(path.read_text()))
            state["command"], state["date"] = command, new_state(command)["date"]
            break
    return state


def save(state: dict, out: Path) -> None:
    """results.json and BENCHMARKS.md, each written whole (a kill mid-write leaves the old one)."""
    for name, text in (("results.json", json.dumps(state, indent=1, sort_keys=True) + "\n"),
                       ("BENCHMARKS.md", render(state, suite_names()))):
        tmp = out / (name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, out / name)


# --- running commands ------------------------------------------------------------------------

def child_env() -> dict:
    """The checkout first on the path, then whatever the caller carried (build/gpu_pydeps)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=path)


def run_cmd(cmd, seconds: float, log) -> int:
    """Run `cmd` for at most `seconds`, its output appended to `log`; 124 when stopped (SIGINT
    first: the suite writes what it measured before it exits), 127 when the program is missing."""
    log.write(f"$ {shlex.join(map(str, cmd))}  (at most {seconds:.0f} s)\n")
    log.flush()
    if seconds < 3:
        log.write("skipped: no time left\n")
        return 124
    try:
        proc = subprocess.Popen(list(map(str, cmd)), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                env=child_env())
    except FileNotFoundError as e:
        log.write(f"not found: {e.filename}\n")
        return 127
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return 124


class Clock:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic() - REPORT_RESERVE_S


def _suite_json(work: Path, kind: str) -> Path:
    stem = f"suite_llm_{TARGET}" + ("_check" if kind == "check" else "")
    return work / kind / f"{stem}.json"


def seed_suite(state: dict, work: Path, kind: str) -> None:
    """Write the rows results.json holds for `kind` where `--resume` finds them."""
    from deplokit.bench.report import to_json
    from deplokit.bench.runner import SuiteResult
    path = _suite_json(work, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    if state.get(kind):
        path.write_text(to_json(SuiteResult("llm", TARGET, "check" if kind == "check" else "bench", state[kind])))
    elif path.exists():
        path.unlink()


def harvest_suite(state: dict, work: Path, kind: str) -> None:
    path = _suite_json(work, kind)
    if path.exists():
        try:
            state[kind] = json.loads(path.read_text())["rows"]
        except (ValueError, KeyError):
            pass


def bench_cmd(work: Path, kind: str, compare: str, filters=(), timeout=120, dtype="float32") -> list[str]:
    cmd = [PY, "-m", "deplokit", "bench", "--suite", "llm", "--resume", "--target", TARGET, "--compare", compare,
           "--dtype", dtype, "--timeout", str(timeout), "--out", str(work / kind)]
    for f in filters:
        cmd += ["--filter", f]
    return cmd


def pytest_summary(text: str) -> str:
    import re
    found = re.findall(r"=+ (.*?(?:passed|failed|error|skipped|deselected).*?) in [\d.]+s", text)
    return found[-1] if found else ""


def ncu_summary(csv_text: str) -> list[tuple[str, str, str]]:
    """(kernel, metric, value) for the metrics that say what limits a kernel."""
    import csv
    lines = [ln for ln in csv_text.splitlines() if ln.startswith('"')]
    rows = []
    for rec in csv.DictReader(lines):
        if rec.get("Metric Name", "") in NCU_METRICS:
            value = f"{rec.get('Metric Value', '')} {rec.get('Metric Unit', '')}".strip()
            rows.append((rec.get("Kernel Name", "?"), rec["Metric Name"], value))
    return rows


def losers(state: dict, n: int = NCU_KERNELS) -> list[str]:
    """The ok entries with the lowest speedup over eager, worst first."""
    ok = [r for r in state.get("eager", ())
          if r.get("status") == "ok" and (r.get("report") or {}).get("speedup_vs_eager")]
    return [r["name"] for r in sorted(ok, key=lambda r: r["report"]["speedup_vs_eager"])[:n]]


def plan_commands(step: Step, work: Path, state: dict) -> list[list[str]]:
    """The commands `step` runs (for --dry-run and for running)."""
    me = str(Path(__file__).resolve())
    if step.name == "preflight":
        return [[PY, "-m", "deplokit", "preflight"]]
    if step.name == "correctness":
        gpu_tests = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*gpu*.py"))
        return [[PY, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider", *gpu_tests],
                [PY, me, "--check-suite", "--work", str(work), "--timeout", "90"]]
    if step.name == "timing":
        return [bench_cmd(work, "eager", "eager")]
    if step.name == "compile":
        return [bench_cmd(work, "compile", "compile", stratified(suite_names()), timeout=240),
                bench_cmd(work, "compile", "compile", timeout=240)]
    if step.name == "extras":
        cmds = []
        if (ROOT / "benchmarks" / "bench_generate.py").exists():
            cmds.append([PY, "benchmarks/bench_generate.py"])
        if any(n.endswith(".bf16") for n in suite_names()):
            cmds.append(bench_cmd(work, "bf16", "eager,compile", timeout=240, dtype="bfloat16"))
        return cmds
    if step.name == "generate":
        return [[PY, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider", "tests/test_cuda_graph.py"],
                [PY, "benchmarks/bench_generate.py", "--device-only", "--gpu-tokens", "64", "--max-length", "128"]]
    if step.name == "ncu":
        return [["ncu", "--csv", "--page", "details", "--launch-count", "8", "--section", "SpeedOfLight",
                 "--section", "MemoryWorkloadAnalysis", "--section", "Occupancy", "--log-file",
                 str(work / f"ncu_{i}.csv"), PY, "scripts/ncu_programs.py", "--entry", name]
                for i, name in enumerate(losers(state))]
    return []


def versions() -> dict:
    """Every version the figures are recorded with, from the image itself; never fails."""
    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            return f"unavailable ({e.__class__.__name__})"
    smi = out(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    parts = [p.strip() for p in smi.split(",")]
    v = {"gpu": parts[0] if len(parts) == 3 else smi or "unavailable",
         "driver": parts[1] if len(parts) == 3 else "unavailable",
         "nvcc": (out(["nvcc", "--version"]).splitlines() or ["unavailable"])[-1],
         "ncu": (out(["ncu", "--version"]).splitlines() or ["unavailable"])[-1]}
    probe = ("import json\nv={}\n"
             "for k, s in (('torch','import torch as m; r=m.__version__'),"
             " ('torch_cuda','import torch; r=torch.version.cuda'),"
             " ('cupy','import cupy as m; r=m.__version__'), ('triton','import triton as m; r=m.__version__'),"
             " ('nvrtc','from cupy.cuda import nvrtc; r=\".\".join(map(str, nvrtc.getVersion()))')):\n"
             "    try:\n        exec(s); v[k]=str(r)\n    except Exception as e:\n        v[k]='unavailable'\n"
             "print(json.dumps(v))")
    try:
        v.update(json.loads(out([PY, "-c", probe]).splitlines()[-1]))
    except (ValueError, IndexError):
        pass
    return v


def run_step(step: Step, state: dict, work: Path, out: Path, clock: Clock, log) -> dict:
    """Run one step; its record for results.json ({"status", "rc", "note"})."""
    budget = min(step.limit_s, clock.left())
    if budget < 3:
        return {"status": "out of time", "note": "the deadline came first"}
    log.write(f"\n=== {step.name}: {step.why} (at most {budget:.0f} s)\n")
    log.flush()
    end = time.monotonic() + budget

    def left():
        return end - time.monotonic()
    if step.name == "versions":
        state["versions"] = versions()
        log.write(json.dumps(state["versions"], indent=1) + "\n")
        return {"status": "done", "rc": 0}
    if step.name == "report":
        return {"status": "done", "rc": 0}
    cmds = plan_commands(step, work, state)
    if step.name == "extras" and not cmds:
        return {"status": "skipped", "note": "no benchmarks/bench_generate.py and no bf16 suite entries on main"}
    if step.name == "ncu" and not cmds:
        return {"status": "skipped", "note": "no timed entry to profile"}
    kinds = {"correctness": "check", "timing": "eager", "compile": "compile", "extras": "bf16"}
    kind = kinds.get(step.name)
    if kind:
        seed_suite(state, work, kind)
    rcs = []
    for i, cmd in enumerate(cmds):
        share = left() * (0.4 if step.name == "correctness" and i == 0 else 1.0)
        if step.name == "extras" and "bench_generate" in " ".join(cmd):
            share = left() / 2
        start = log.tell()
        rcs.append(run_cmd(cmd, share, log))
        log.flush()
        if step.name == "correctness" and i == 0:
            text = Path(log.name).read_text(errors="replace")[start:]
            state["gpu_tests"] = pytest_summary(text) or f"pytest exit {rcs[-1]}"
        if step.name in ("extras", "generate") and "bench_generate" in " ".join(cmd):
            tail = Path(log.name).read_text(errors="replace")[start:].strip().splitlines()[-6:]
            state["generate"] = {"log": " / ".join(tail), "rc": rcs[-1]}
    if kind:
        harvest_suite(state, work, kind)
    if step.name == "extras" and not (ROOT / "benchmarks" / "bench_generate.py").exists():
        state["generate"] = {"note": "skipped: benchmarks/bench_generate.py is not on main"}
    if step.name == "ncu":
        state["ncu"] = []
        with open(out / "ncu.csv", "w") as combined:
            for i, name in enumerate(losers(state)):
                f = work / f"ncu_{i}.csv"
                text = f.read_text(errors="replace") if f.exists() else ""
                combined.write(f"# {name}\n{text}\n")
                state["ncu"] += [[name, k, m, v] for k, m, v in ncu_summary(text)]
    rc = max(rcs, default=0)
    if 124 in rcs:
        return {"status": "out of time", "rc": 124, "note": "resume with the same --out"}
    if step.name == "preflight" and rc != 0:
        return {"status": "failed", "rc": rc, "note": "see session.log; docs/GPU_RUNBOOK.md section 4"}
    # failing entries are results (their rows say why); the step itself finished
    return {"status": "done" if rc in (0, 1) else "failed", "rc": rc}


def check_suite(work: Path, timeout: float) -> int:
    """Every suite entry checked on the device (runner.check_entry), resumable like the bench."""
    from deplokit.bench.report import summary, to_json
    from deplokit.bench.resume import merged, previous_rows, still_to_run
    from deplokit.bench.runner import run_suite
    from deplokit.bench.suite import suite_entries
    # FP32 first: if the deadline comes, the entries the timing step measures are checked
    entries = tuple(sorted(suite_entries("llm"), key=lambda e: e.dtype != "float32"))
    path = _suite_json(work, "check")
    path.parent.mkdir(parents=True, exist_ok=True)
    previous = previous_rows(str(path), "llm", TARGET, "check")
    todo = still_to_run(entries, previous)

    def checkpoint(result):
        path.write_text(to_json(merged(entries, previous, result)))

    def progress(i, n, row):
        print(f"[{i + 1}/{n}] {row['name']}: {row['status']} {row.get('check') or row.get('error') or ''}", flush=True)
    try:
        result = run_suite(todo, "check", target=TARGET, timeout_s=timeout, progress=progress, checkpoint=checkpoint)
    except KeyboardInterrupt:
        return 130
    result = merged(entries, previous, result)
    print(summary(result), end="")
    return 0 if not result.failed else 1


def dry_run(work: Path, state: dict, deadline: float, plan=PLAN) -> str:
    lines = [f"plan for a {deadline:.0f} s deadline (estimates on an H100; each step also stops at the deadline):"]
    for step in plan:
        done = (state.get("steps", {}).get(step.name) or {}).get("status") == "done"
        lines.append(f"  {step.name:<12} ~{step.estimate_s:>4} s  (limit {step.limit_s} s)  {step.why}"
                     + ("  [done before: skipped]" if done else ""))
        for cmd in plan_commands(step, work, state):
            lines.append("      " + shlex.join(cmd))
        if step.name == "ncu" and not losers(state):
            lines.append(f"      the {NCU_KERNELS} entries that lose most, chosen after timing")
    total = sum(s.estimate_s for s in plan)
    lines.append(f"total ~{total} s + {MACHINE_START_S} s machine start = {total + MACHINE_START_S} s "
                 f"(one device session: {SESSION_S} s)")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deadline", type=float, default=520, help="seconds for the whole run (default: %(default)s)")
    ap.add_argument("--out", default="device_out", help="results folder, $OUT on the device (default: %(default)s)")
    ap.add_argument("--results", default=None, metavar="FILE", help="a results.json carried back: resume from it")
    ap.add_argument("--work", default=None, help="scratch folder for the suite's own files (default: a temp dir)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan with each step's estimate, run nothing")
    ap.add_argument("--plan", choices=sorted(PLANS), default="suite",
                    help="suite: the benchmark suite session; generate: SmolLM2 tokens/s (default: %(default)s)")
    ap.add_argument("--check-suite", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=90, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.deadline <= 0:
        print("device_session: --deadline must be a positive number of seconds", file=sys.stderr)
        return 2
    out = Path(args.out)
    work = Path(args.work) if args.work else Path(tempfile.gettempdir()) / "deplokit_device_session"
    if args.check_suite:
        return check_suite(work, args.timeout)
    if args.results and not Path(args.results).exists():
        print(f"device_session: --results {args.results}: no such file", file=sys.stderr)
        return 2
    command = "python scripts/device_session.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    state = load_state(out, args.results, command)
    if args.dry_run:
        print(dry_run(work, state, args.deadline, PLANS[args.plan]), end="")
        return 0
    clock = Clock(args.deadline)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    stop = None
    with open(out / "session.log", "a") as log:
        for step in PLANS[args.plan]:
            done = (state["steps"].get(step.name) or {}).get("status") == "done"
            if done and step.name not in ("versions", "report"):
                print(f"[{step.name}] done before; skipped")
                continue
            if stop and step.name != "report":
                state["steps"][step.name] = {"status": "skipped", "note": stop}
                continue
            t0 = time.monotonic()
            record = run_step(step, state, work, out, clock, log)
            record["seconds"] = round(time.monotonic() - t0, 1)
            state["steps"][step.name] = record
            save(state, out)
            print(f"[{step.name}] {record['status']} in {record['seconds']:.0f} s {record.get('note', '')}".rstrip(),
                  flush=True)
            if step.name == "preflight" and record["status"] == "failed":
                stop = "preflight failed"
    save(state, out)
    unfinished = [n for n, s in state["steps"].items() if s.get("status") != "done"]
    print(f"wrote {out / 'BENCHMARKS.md'}; not done: {', '.join(unfinished) or 'none'}")
    return 0 if not unfinished else 1


if __name__ == "__main__":
    sys.exit(main())
