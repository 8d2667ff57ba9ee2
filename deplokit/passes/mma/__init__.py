"""Tensor cores (mma.sync), an advanced feature beside the core (README.md here; off:
008_register_tile.mma="off", the default but for precision="tf32")."""
from __future__ import annotations

# 008 and k001 build on these modules and these modules on the schedule's and the lowering's
# helpers: the two packages load first, so either module may be imported on its own
from .. import lower, schedule  # noqa: F401
