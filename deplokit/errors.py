"""One error family: every user-facing failure is a DeplokitError with a message that
names what went wrong, where, and what is supported. The CLI prints it on one line."""


class DeplokitError(Exception):
    """Base class of every error deplokit raises on bad input."""


class ExpressionError(DeplokitError):
    """A `-c` expression or model file that cannot be evaluated."""


class CaptureError(DeplokitError):
    """torch.export could not capture the program."""


class UnsupportedOpError(DeplokitError):
    """An operator outside the covered set."""


class UnsupportedDtypeError(DeplokitError):
    """A tensor dtype deplokit does not compute in."""


class DynamicShapeError(DeplokitError):
    """A shape that is not known at compile time."""


class ExecutionError(DeplokitError):
    """Wrong inputs given to Compilation.run, or an unknown backend."""


class UnknownModelError(DeplokitError):
    """A model name that is neither a preset nor a file."""


class ConfigError(DeplokitError):
    """A compile config key that names no pass's knob, or a value outside the knob's domain."""
