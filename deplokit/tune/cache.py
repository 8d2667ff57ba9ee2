"""The tuning cache: every finished trial, and ptxas's statistics, in one SQLite file.

    ~/.cache/deplokit/tune.db     (the folder: $DEPLOKIT_CACHE_DIR; the file: --cache PATH)

A trial is keyed by the kernel's structural hash (deplokit/ir/structural.py), the target, the
objective and the knob config (canonical JSON): a trial already measured is read back, never
run again. Each trial is committed as it finishes, so a run interrupted by Ctrl-C keeps every
finished trial and the next run resumes from them. A file that is not a readable cache is
renamed `<name>.corrupt` (or `.corrupt1`, ...) and a new one is started; `notes` says so.
"""
from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass

from ..errors import CacheError

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trials (
    kernel TEXT NOT NULL, target TEXT NOT NULL, objective TEXT NOT NULL, config TEXT NOT NULL,
    cost_us REAL, ok INTEGER NOT NULL, error TEXT NOT NULL DEFAULT '', seq INTEGER NOT NULL,
    PRIMARY KEY (kernel, target, objective, config));
CREATE TABLE IF NOT EXISTS ptxas (
    source TEXT NOT NULL, arch TEXT NOT NULL, stats TEXT NOT NULL, PRIMARY KEY (source, arch));
"""


def default_cache_path() -> str:
    folder = os.environ.get("DEPLOKIT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "deplokit")
    return os.path.join(folder, "tune.db")


@dataclass(frozen=True)
class CachedTrial:
    config: tuple[tuple[str, object], ...]
    cost_us: float | None
    ok: bool
    error: str


def config_key(config) -> str:
    """Canonical text of a knob config: the same knobs always give the same key."""
    return json.dumps(sorted((k, v) for k, v in dict(config).items()), separators=(",", ":"))


def _config_of(key: str) -> tuple[tuple[str, object], ...]:
    return tuple((k, v) for k, v in json.loads(key))


class TuneCache:
    """Open (or create) the cache at `path`. `create=False` opens only an existing file: a
    compile that merely looks for a tuned config never creates one."""

    def __init__(self, path: str | None = None, create: bool = True):
        self.path = os.path.abspath(path or default_cache_path())
        self.notes: list[str] = []
        self.conn: sqlite3.Connection | None = None
        # trials this session read back / ran and stored: program-level options and the kernel
        # defaults that priced them too (a resumed run's history shows only the chosen program's)
        self.read_back = self.recorded = 0
        if not create and not os.path.exists(self.path):
            return
        self.conn = self._open()

    # -- opening -----------------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        if os.path.isdir(self.path):
            raise CacheError(f"tune cache {self.path} is a folder, not a file; pass --cache FILE")
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
        except OSError as e:
            raise CacheError(f"cannot create the folder of tune cache {self.path}: {e.strerror or e}") from None
        try:
            return self._connect()
        except sqlite3.DatabaseError as e:
            if not os.path.isfile(self.path):
                raise CacheError(f"cannot open tune cache {self.path}: {e}") from None
            aside = self._set_aside()
            self.notes.append(f"tune cache {self.path} was unreadable ({e}); moved it to {aside} and started "
                              "a new one")
            try:
                return self._connect()
            except sqlite3.DatabaseError as e2:
                raise CacheError(f"cannot create tune cache {self.path}: {e2}") from None

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            conn.executescript(_SCHEMA)
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is None:
                conn.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif row[0] != str(SCHEMA_VERSION):
                raise sqlite3.DatabaseError(f"schema version {row[0]}, expected {SCHEMA_VERSION}")
            conn.execute("SELECT kernel, target, objective, config, cost_us, ok, error, seq FROM trials LIMIT 1")
        except sqlite3.DatabaseError:
            conn.close()
            raise
        except sqlite3.OperationalError as e:   # read-only folder, locked file
            conn.close()
            raise CacheError(f"cannot use tune cache {self.path}: {e}") from None
        return conn

    def _set_aside(self) -> str:
        n, aside = 0, self.path + ".corrupt"
        while os.path.exists(aside):
            n += 1
            aside = f"{self.path}.corrupt{n}"
        os.replace(self.path, aside)
        for extra in ("-wal", "-shm", "-journal"):
            if os.path.exists(self.path + extra):
                os.remove(self.path + extra)
        return aside

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- trials -------------------------------------------------------------------------------------
    def lookup(self, kernel: str, target: str, objective: str, config) -> CachedTrial | None:
        if self.conn is None:
            return None
        row = self._query("SELECT config, cost_us, ok, error FROM trials WHERE kernel=? AND target=? AND "
                          "objective=? AND config=?", (kernel, target, objective, config_key(config)), one=True)
        if row is None:
            return None
        self.read_back += 1
        return CachedTrial(_config_of(row[0]), row[1], bool(row[2]), row[3])

    def record(self, kernel: str, target: str, objective: str, config, cost_us: float | None,
               ok: bool, error: str = "") -> None:
        """Store one finished trial, committed at once."""
        if self.conn is None:
            self.conn = self._open()
        try:
            seq = self.conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM trials").fetchone()[0]
            self.conn.execute("INSERT OR REPLACE INTO trials VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                              (kernel, target, objective, config_key(config), cost_us, int(ok), error, seq))
            self.recorded += 1
        except sqlite3.Error as e:
            raise CacheError(f"cannot write tune cache {self.path}: {e}") from None

    def trials(self, kernel: str, target: str, objective: str) -> list[CachedTrial]:
        rows = self._query("SELECT config, cost_us, ok, error FROM trials WHERE kernel=? AND target=? AND "
                           "objective=? ORDER BY seq", (kernel, target, objective)) or []
        return [CachedTrial(_config_of(c), cost, bool(ok), err) for c, cost, ok, err in rows]

    def best(self, kernel: str, target: str, objective: str | None = None) -> tuple[str, CachedTrial] | None:
        """(objective, best trial) for a kernel; without `objective`, measured (gpu) times win over
        the model's predictions."""
        for obj in ([objective] if objective else ["gpu", "model"]):
            row = self._query("SELECT config, cost_us, ok, error FROM trials WHERE kernel=? AND target=? AND "
                              "objective=? AND ok=1 AND cost_us IS NOT NULL ORDER BY cost_us, seq LIMIT 1",
                              (kernel, target, obj), one=True)
            if row is not None:
                return obj, CachedTrial(_config_of(row[0]), row[1], True, row[3])
        return None

    def _query(self, sql: str, args: tuple, one: bool = False):
        if self.conn is None:
            return None
        try:
            cur = self.conn.execute(sql, args)
            return cur.fetchone() if one else cur.fetchall()
        except sqlite3.Error as e:
            raise CacheError(f"cannot read tune cache {self.path}: {e}") from None

    # -- ptxas ----------------------------------------------------------------------------------------
    def ptxas(self, source_hash: str, arch: str) -> dict | None:
        row = self._query("SELECT stats FROM ptxas WHERE source=? AND arch=?", (source_hash, arch), one=True)
        return None if row is None else json.loads(row[0])

    def record_ptxas(self, source_hash: str, arch: str, stats: dict) -> None:
        if self.conn is None:
            self.conn = self._open()
        try:
            self.conn.execute("INSERT OR REPLACE INTO ptxas VALUES (?, ?, ?)",
                              (source_hash, arch, json.dumps(stats, sort_keys=True)))
        except sqlite3.Error as e:
            raise CacheError(f"cannot write tune cache {self.path}: {e}") from None
