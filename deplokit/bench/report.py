"""A suite's results as JSON and as a markdown table; every number is a measured one, and an
entry that failed says how (mismatch, error, crash, timeout) instead of a time."""
from __future__ import annotations

import json

from .runner import SuiteResult


def to_json(result: SuiteResult) -> str:
    data = {"suite": result.suite, "target": result.target, "job": result.job,
            "geomean_speedup": result.geomeans() if result.job == "bench" else None,
            "failed": [r["name"] for r in result.failed], "rows": result.rows}
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _us(v) -> str:
    return "" if v is None else f"{v:.2f}"


def _x(v) -> str:
    return "" if v is None else f"{v:.2f}x"


def to_markdown(result: SuiteResult) -> str:
    if result.job == "compile":
        lines = [f"# deplokit suite {result.suite}: compile only ({result.target})", "",
                 "| entry | status | kernels | compile s | NVRTC s |", "| --- | --- | ---: | ---: | ---: |"]
        for r in result.rows:
            if r["status"] == "ok":
                lines.append(f"| {r['name']} | ok | {r['kernels']} | {r['compile_s']:.3f} | {r['nvrtc_s']:.3f} |")
            else:
                lines.append(f"| {r['name']} | {r['status']}: {r.get('error', '')} | | | |")
        return "\n".join(lines) + "\n"
    g = result.geomeans()
    gpu = next((r["report"]["gpu"] for r in result.rows if "report" in r), "")
    lines = [f"# deplokit suite {result.suite} on {gpu} ({result.target})", "",
             f"geomean speedup vs eager: {_x(g['eager'])}, vs torch.compile: {_x(g['compile'])}", "",
             "| entry | deplokit us | eager us | compile us | vs eager | vs compile | GB/s | % peak | status |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in result.rows:
        rep = r.get("report")
        if rep is None:
            why = r.get("error") or r.get("check", "")
            lines.append(f"| {r['name']} | | | | | | | | {r['status']}: {why} |")
            continue
        lines.append(f"| {r['name']} | {_us(rep['deplokit_us'])} | {_us(rep['eager_us'])} | {_us(rep['compile_us'])} | "
                     f"{_x(rep['speedup_vs_eager'])} | {_x(rep['speedup_vs_compile'])} | {rep['gbs']:.0f} | "
                     f"{rep['pct_of_peak']:.1f}% ({rep['bound']}) | ok |")
    return "\n".join(lines) + "\n"


def summary(result: SuiteResult) -> str:
    ok = len(result.rows) - len(result.failed)
    lines = [f"{ok}/{len(result.rows)} entries ok"]
    lines += [f"FAILED {r['name']}: {r['status']}: {r.get('error') or r.get('check', '')}" for r in result.failed]
    if result.job == "bench":
        g = result.geomeans()
        lines.append(f"geomean speedup vs eager: {_x(g['eager']) or 'n/a'}; "
                     f"vs torch.compile: {_x(g['compile']) or 'n/a'}")
    return "\n".join(lines) + "\n"
