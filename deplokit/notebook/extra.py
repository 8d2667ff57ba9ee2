"""The notebook extra's optional libraries, asked for where they are needed."""
from __future__ import annotations

import importlib

from ..errors import NotebookExtraMissing


def require(module: str, what: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise NotebookExtraMissing(f"{what} needs {module}: pip install 'deplokit[notebook]'") from None
