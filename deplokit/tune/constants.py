"""The cost model's fitted constants (calibrate.py), kept per target in the tune cache."""
from __future__ import annotations

import dataclasses
import json

from .cost_model import CostConstants


def save_constants(cache, target, constants: CostConstants) -> None:
    cache.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                       (f"constants:{target.name}", json.dumps(constants.as_dict(), sort_keys=True)))


def load_constants(cache, target) -> CostConstants | None:
    if cache is None or cache.conn is None:
        return None
    row = cache.conn.execute("SELECT value FROM meta WHERE key = ?", (f"constants:{target.name}",)).fetchone()
    if row is None:
        return None
    values = json.loads(row[0])
    known = {f.name for f in dataclasses.fields(CostConstants)}
    return CostConstants(**{k: v for k, v in values.items() if k in known})
