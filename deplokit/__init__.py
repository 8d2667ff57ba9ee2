"""deplokit: a teaching compiler from PyTorch to CUDA through six inspectable IRs."""
from .compilation import BACKENDS, CheckResult, Compilation, compile, compile_model
from .errors import (CaptureError, DeplokitError, DynamicShapeError, ExecutionError, ExpressionError,
                     UnsupportedDtypeError, UnsupportedOpError)
from .target import TARGETS, Target, get_target

__version__ = "0.1.0"

__all__ = ["compile", "compile_model", "Compilation", "CheckResult", "BACKENDS", "Target", "TARGETS", "get_target",
           "DeplokitError", "CaptureError", "DynamicShapeError", "ExecutionError", "ExpressionError",
           "UnsupportedDtypeError", "UnsupportedOpError"]
