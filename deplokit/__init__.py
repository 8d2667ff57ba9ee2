"""deplokit: a teaching compiler from PyTorch to CUDA through six inspectable IRs.

`compile`, `compile_model`, `Compilation`, `CheckResult` and `BACKENDS` load on first use
(PEP 562), so `import deplokit.ir` or `deplokit.passes` pulls in neither torch's frontend nor
the runtime: the IR and the passes stand on their own. The error family and the targets are
light and load at once.
"""
from .errors import (
    CacheError,
    CacheFullError,
    CaptureError,
    ConfigError,
    DeplokitError,
    DeviceUnavailableError,
    DisassemblerError,
    DynamicShapeError,
    ExecutionError,
    ExpressionError,
    IRInvariantError,
    LaunchPlanError,
    ModelFileError,
    NotebookExtraMissing,
    NvccError,
    NvrtcCrash,
    NvrtcError,
    PromptTooLongError,
    SimulationError,
    TensorMapError,
    UnknownModelError,
    UnsupportedDtypeError,
    UnsupportedOpError,
)
from .target import TARGETS, Target, get_target

__version__ = "0.1.0"

_FACADE = ("compile", "compile_model", "Compilation", "CheckResult", "BACKENDS")
_GENERATE = ("load_lm",)

__all__ = [*_FACADE, *_GENERATE, "Target", "TARGETS", "get_target",
           "DeplokitError", "CaptureError", "DynamicShapeError", "ExecutionError", "ExpressionError",
           "UnsupportedDtypeError", "UnsupportedOpError", "UnknownModelError", "ModelFileError",
           "DeviceUnavailableError", "LaunchPlanError", "NvccError", "NvrtcError", "NvrtcCrash", "SimulationError",
           "CacheError",
           "NotebookExtraMissing", "ConfigError", "DisassemblerError", "IRInvariantError", "TensorMapError",
           "PromptTooLongError",
           "CacheFullError"]


def __getattr__(name: str):
    if name in _FACADE:
        from . import compilation  # lazy on purpose: see the module docstring
        return getattr(compilation, name)
    if name in _GENERATE:
        from .generate import lm
        return getattr(lm, name)
    raise AttributeError(f"module 'deplokit' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_FACADE) | set(_GENERATE))
