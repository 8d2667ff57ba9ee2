"""The notebook extra's optional libraries, asked for where they are needed."""
from __future__ import annotations

import importlib

from ..errors import DeplokitError


class NotebookExtraMissing(DeplokitError, ImportError):
    """A widget or plot was asked for and a library of the notebook extra is not installed.
    An ImportError too, so deplokit.display falls back to text where it happens while drawing."""


def require(module: str, what: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise NotebookExtraMissing(f"{what} needs {module}: pip install 'deplokit[notebook]'") from None
