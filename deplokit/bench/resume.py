"""Picking a suite run up where an earlier one stopped (`deplokit bench --resume`).

A device session allows a command only minutes, fewer than the whole suite takes, and the CLI
rewrites its JSON after every entry. So a run cut short leaves a valid JSON of what it
measured; `--resume` reads it, runs only the entries without an `ok` row, and writes the
rows of both runs together, in suite order.
"""
from __future__ import annotations

import json
import os

from ..errors import DeplokitError
from .runner import SuiteResult


def previous_rows(path: str, suite: str, target: str, job: str) -> dict[str, dict]:
    """The rows of an earlier run's JSON at `path`, by entry name ({} when there is none)."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        rows = data["rows"]
        mine = (data["suite"], data["target"], data["job"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DeplokitError(f"--resume: cannot read {path} ({type(e).__name__}: {e}); move it away to start "
                            "afresh") from None
    if mine != (suite, target, job):
        raise DeplokitError(f"--resume: {path} holds suite {mine[0]}, target {mine[1]}, job {mine[2]}; "
                            f"this run is suite {suite}, target {target}, job {job}")
    return {r["name"]: r for r in rows if isinstance(r, dict) and "name" in r}


def still_to_run(entries, previous: dict[str, dict]):
    """The entries without an `ok` row in `previous` (failed ones run again)."""
    return tuple(e for e in entries if previous.get(e.name, {}).get("status") != "ok")


def merged(entries, previous: dict[str, dict], result: SuiteResult) -> SuiteResult:
    """`result`'s rows and the earlier ones it did not redo, in the order of `entries`; rows of
    the earlier run for entries outside `entries` (another --filter) are kept after them."""
    new = {r["name"]: r for r in result.rows}
    names = [e.name for e in entries]
    rows = [new.get(n) or previous[n] for n in names if n in new or n in previous]
    rows += [r for n, r in previous.items() if n not in names]
    return SuiteResult(result.suite, result.target, result.job, rows)
