"""The simulator's error: every hazard it detects is raised as a SimulationError (defined
with the rest of the error family in deplokit/errors.py)."""
from ...errors import SimulationError

__all__ = ["SimulationError"]
