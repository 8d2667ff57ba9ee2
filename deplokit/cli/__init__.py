"""The `deplokit` command line: `main` (entry.py) runs one command (app.py)."""
from .entry import main  # noqa: F401  (the console script and `python -m deplokit` call deplokit.cli.main)
