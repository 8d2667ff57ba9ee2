"""`deplokit bench --suite S --list`: the suite's entries and shapes, without loading torch."""
from __future__ import annotations

import sys

from ..bench.suite import format_list, select, suite_entries


def cmd_list(args) -> int:
    sys.stdout.write(format_list(select(suite_entries(args.suite), args.filter)))
    return 0
