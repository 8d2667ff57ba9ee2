"""The simulator's error: every hazard it detects is raised as a SimulationError."""
from __future__ import annotations

from ...errors import DeplokitError


class SimulationError(DeplokitError):
    """The simulated kernel did something invalid: an out-of-bounds access, a race, a
    divergent barrier, a misaligned vector access, ..."""
