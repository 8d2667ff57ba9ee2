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


class PromptTooLongError(ExecutionError):
    """A prompt that does not fit a decoder's static KV cache."""


class CacheFullError(ExecutionError):
    """A decode step past the last position of a decoder's static KV cache."""


class UnknownModelError(DeplokitError):
    """A model name that is neither a preset nor a file."""


class ModelFileError(UnknownModelError):
    """A model's weights file that is missing, unreadable, corrupt, or holds a model deplokit
    cannot load exactly."""


class DeviceUnavailableError(DeplokitError):
    """Something needs a CUDA device (CuPy execution, timing) and none is usable."""


class LaunchPlanError(ExecutionError):
    """A kernel program that cannot be launched as it stands (limits, buffers, types)."""


class TensorMapError(ExecutionError):
    """A tensor or box the driver cannot describe as a tiled tensor map."""


class NvccError(DeplokitError):
    """nvcc rejected a source, timed out, or is not installed. `.log` holds its output."""

    def __init__(self, message: str, log: str = "", line: int | None = None,
                 source_line: str | None = None):
        super().__init__(message)
        self.log = log
        self.line = line
        self.source_line = source_line


class NvrtcError(NvccError):
    """NVRTC rejected the source, or NVRTC could not be loaded. `.log` holds its output."""


class NvrtcCrash(NvrtcError):
    """NVRTC's process died while compiling (a crash inside NVIDIA's compiler, not a rejected
    source): the fuzzer compiles in a worker process and reports it (fuzz/isolated_nvrtc.py)."""


class SimulationError(DeplokitError):
    """The simulated kernel did something invalid: an out-of-bounds access, a race, a
    divergent barrier, a misaligned vector access, ..."""


class CacheError(DeplokitError):
    """The tuning cache cannot be opened or written (a folder in its place, no permission)."""


class NotebookExtraMissing(DeplokitError, ImportError):
    """A widget or plot was asked for and a library of the notebook extra is not installed.
    An ImportError too, so deplokit.display falls back to text where it happens while drawing."""


class DisassemblerError(DeplokitError):
    """No SASS disassembler (cuobjdump, nvdisasm) is installed, or it refused the cubin."""


class IRInvariantError(DeplokitError):
    """An IR breaks one of its invariants, a bug in a pass that passes/verify.py catches at a
    stage boundary (`invariant` names which, `kernel` where)."""

    def __init__(self, stage: str, invariant: str, kernel: str, detail: str):
        self.stage, self.invariant, self.kernel, self.detail = stage, invariant, kernel, detail
        super().__init__(f"{stage} IR invariant {invariant} violated in kernel {kernel}: {detail}")


class ConfigError(DeplokitError):
    """A compile config key that names no pass's knob, or a value outside the knob's domain."""
