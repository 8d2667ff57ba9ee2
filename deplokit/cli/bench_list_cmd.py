"""`deplokit bench --suite S --list`: the suite's entries and shapes, without loading torch."""
from __future__ import annotations

import sys

from ..bench.suite import format_list, select, suite_entries


def cmd_list(args) -> int:
    entries = select(suite_entries(args.suite), args.filter)
    if args.dtype:
        entries = tuple(e for e in entries if e.dtype == args.dtype)
    sys.stdout.write(format_list(entries))
    return 0
