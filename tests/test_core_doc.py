"""docs/CORE.md lists the core's files with their true line counts (scripts/core_lines.py writes it)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_core_md_is_current():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "core_lines.py"), "--check"], capture_output=True,
                       text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr


def test_every_file_core_md_links_exists():
    sys.path.insert(0, str(ROOT / "scripts"))
    import core_lines
    files = [f for _, fs in core_lines.CORE for f, _ in fs] + [f for _, fs in core_lines.PATHS for f in fs]
    files += [f for _, _, fs in core_lines.ADVANCED for f in fs]
    assert all((ROOT / f).is_file() for f in files), [f for f in files if not (ROOT / f).is_file()]
    # the core is read in order, each file once
    core = [f for _, fs in core_lines.CORE for f, _ in fs]
    assert len(core) == len(set(core))
