"""How a KernelProgram runs on a GPU, decided on the host: the buffers to allocate (and where
the temporaries share one scratch arena), each launch's grid, block, shared memory and
argument order, checked against CUDA's limits. No GPU and no CuPy needed: the CuPy backend
(runtime/cupy_backend.py) only follows the plan, and tests check the plan on any machine.

Every kernel parameter is a pointer to a flat buffer, so a launch's arguments are its
parameters' buffers in declaration order, followed by its tensor maps (TMA, sm_90), which
the plan records as the driver's encoding arguments for the buffer each maps. A buffer is stored with the element type its
kernels declare (`float` for masks as well: the simulator reads a bool as 0.0 / 1.0), so a
bool or integer input may be converted on upload. A temporary lives from the first launch
that names it to the last; temporaries whose lives do not overlap share arena bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import LaunchPlanError
from ..ir import kernel_ir as K
from ..ir.types import CTYPE_DTYPE, DTYPE_BYTES
from ..target import STATIC_SMEM_PER_BLOCK
from .launches import launch_sequence
from .tensor_map import TensorMapArgs, tensor_map_args

# CUDA's launch limits (every architecture deplokit targets).
MAX_BLOCK_THREADS = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = ((1 << 31) - 1, 65535, 65535)
ARENA_ALIGN = 256                       # bytes: cudaMalloc's alignment, enough for float4 and TMA
# A kernel may declare at most STATIC_SMEM_PER_BLOCK of static __shared__ (ptxas refuses
# more); beyond that only dynamic shared memory reaches the target's opt-in maximum, and only
# after cudaFuncAttributeMaxDynamicSharedMemorySize is raised for the kernel (cupy_backend does).
STATIC_SMEM_LIMIT = STATIC_SMEM_PER_BLOCK



@dataclass(frozen=True)
class BufferSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str                  # the program's type: float32 | int64 | int32 | bool
    device_dtype: str           # how the kernels store it: float32 | int64 | int32
    kind: str                   # input | param | const | temp | output | scalar | state
    offset: int | None = None   # byte offset in the scratch arena (temporaries only)
    alias: str = ""             # a written buffer living in this state buffer's memory (in place)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.device_dtype]


@dataclass(frozen=True)
class TensorMapArg:
    """A `CUtensorMap` argument of a launch (after its buffers): the kernel's parameter, the
    buffer it maps, and cuTensorMapEncodeTiled's arguments but the buffer's address (dims,
    strides, box, swizzle, element type), which the backend encodes for the device buffer."""
    param: str
    buffer: str
    args: TensorMapArgs

    def describe(self) -> str:
        a = self.args
        return (f"{self.param} = tensor map of {self.buffer}: dims {a.global_dims} strides {a.global_strides} B "
                f"box {a.box_dims} swizzle {a.swizzle} type {a.data_type} (innermost first)")


@dataclass(frozen=True)
class KernelLaunch:
    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[str, ...]       # buffer names, in the kernel's parameter order
    static_smem: int            # bytes of __shared__ the kernel declares
    dynamic_smem: int = 0       # bytes of dynamic shared memory the launch gives it (KernelFunc.dynamic_smem:
                                # a kernel above the static limit carves its arrays from it)
    params: tuple[str, ...] = ()  # the kernel's parameter names (a deduplicated launch binds
                                  # other buffers to them); () when they are the buffers' names
    tensor_maps: tuple[TensorMapArg, ...] = ()   # TMA: passed by value after the buffers

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


@dataclass(frozen=True)
class LaunchPlan:
    buffers: tuple[BufferSpec, ...]
    launches: tuple[KernelLaunch, ...]
    inputs: tuple[str, ...]     # what run() takes, in order
    outputs: tuple[str, ...]
    scratch_bytes: int          # the arena all temporaries live in

    def buffer(self, name: str) -> BufferSpec:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    def describe(self) -> str:
        """The plan as text: buffers, arena offsets, launches."""
        lines = [f"# scratch arena: {self.scratch_bytes} bytes"]
        for b in self.buffers:
            at = f" @ arena+{b.offset}" if b.offset is not None else ""
            conv = f" (stored as {b.device_dtype})" if b.device_dtype != b.dtype else ""
            lines.append(f"# {b.name}: {b.shape} {b.dtype} {b.kind}{conv}{at}")
        for ln in self.launches:
            args = ", ".join(ln.args + tuple(t.param for t in ln.tensor_maps))
            lines.append(f"{ln.name}<<<{ln.grid}, {ln.block}, {ln.dynamic_smem}>>>({args})"
                         f"  static smem {ln.static_smem} B")
            lines += [f"#   {t.describe()}" for t in ln.tensor_maps]
        return "\n".join(lines)


def static_smem_bytes(kernel: K.KernelFunc) -> int:
    """Bytes of static shared memory a kernel declares: ptxas's figure when the kernel
    carries one, else its shared arrays and mbarriers (kernel_ir.declared_smem_bytes)."""
    return kernel.smem_bytes if kernel.smem_bytes is not None else K.declared_smem_bytes(kernel)


def check_launch(kernel: K.KernelFunc, target) -> None:
    """Raise LaunchPlanError when `kernel`'s grid, block or shared memory exceed CUDA's limits
    or `target`'s."""
    where = f"kernel {kernel.name}"
    if any(d < 1 for d in kernel.grid) or any(d < 1 for d in kernel.block):
        raise LaunchPlanError(f"{where}: grid {kernel.grid} and block {kernel.block} must be positive")
    if kernel.threads > MAX_BLOCK_THREADS:
        raise LaunchPlanError(f"{where}: {kernel.threads} threads per block; CUDA allows at most {MAX_BLOCK_THREADS}")
    for axis, d, most in zip("xyz", kernel.block, MAX_BLOCK_DIMS):
        if d > most:
            raise LaunchPlanError(f"{where}: block.{axis} = {d}; CUDA allows at most {most}")
    for axis, d, most in zip("xyz", kernel.grid, MAX_GRID_DIMS):
        if d > most:
            raise LaunchPlanError(f"{where}: grid.{axis} = {d}; CUDA allows at most {most}")
    smem = static_smem_bytes(kernel)
    if smem > STATIC_SMEM_LIMIT:
        raise LaunchPlanError(f"{where}: {smem} bytes of static shared memory; a kernel may declare at most "
                              f"{STATIC_SMEM_LIMIT} statically (more needs dynamic shared memory)")
    total = smem + kernel.dynamic_smem
    if target is not None and total > target.dynamic_smem_per_block:
        raise LaunchPlanError(f"{where}: {total} bytes of shared memory ({smem} static, {kernel.dynamic_smem} "
                              f"dynamic); {target.name} allows {target.dynamic_smem_per_block} per block")


def build_plan(program: K.KernelProgram, input_names, target=None, launches=(), whole=None) -> LaunchPlan:
    """The launch plan of `program`, whose user inputs are `input_names` (in run() order).
    A deduplicated program also needs its `launches` and the `whole` Loop-IR program (every
    tensor a launch binds, and the outputs)."""
    types, kinds, aliases = {}, {}, {}
    everything = tuple(program.buffers) + tuple(program.written)
    if whole is not None:
        everything = tuple(whole.buffers) + tuple(whole.written) + everything
    for b in everything:
        types.setdefault(b.name, b.type)
        kinds.setdefault(b.name, b.kind)
        if getattr(b, "alias", ""):
            aliases[b.name] = b.alias
    outputs = tuple(whole.outputs if whole is not None else program.outputs)
    device: dict[str, str] = {}
    lives: dict[str, list[int]] = {}
    plan_launches = []
    for i, (k, bound) in enumerate(launch_sequence(program, launches)):
        check_launch(k, target)
        args = tuple(bound.get(p.name, p.name) for p in k.params)
        for p, name in zip(k.params, args):
            if name not in types:
                raise LaunchPlanError(f"kernel {k.name}: parameter {p.name} names no buffer of the program")
            numel = types[name].numel
            if p.size and p.size != numel:
                raise LaunchPlanError(f"kernel {k.name}: parameter {p.name} expects {p.size} elements, "
                                      f"buffer {name} has {numel}")
            want = CTYPE_DTYPE.get(p.ctype)
            if want is None:
                raise LaunchPlanError(f"kernel {k.name}: parameter {p.name} has type {p.ctype}; "
                                      f"supported: {', '.join(CTYPE_DTYPE)}")
            if device.setdefault(name, want) != want:
                raise LaunchPlanError(f"buffer {name} is {device[name]} in one kernel and {want} in "
                                      f"kernel {k.name}")
            lives.setdefault(name, [i, i])[1] = i
        params = tuple(p.name for p in k.params)
        plan_launches.append(KernelLaunch(k.name, tuple(k.grid), tuple(k.block), args, static_smem_bytes(k),
                                          k.dynamic_smem, params=params if params != args else (),
                                          tensor_maps=_tensor_maps(k, dict(zip(params, args)), types, device)))
    launches = plan_launches
    for name in input_names:
        if name not in types:
            raise LaunchPlanError(f"input {name} is not a buffer of the program")
    for o in outputs:
        if o not in types:
            raise LaunchPlanError(f"output {o} is not a buffer of the program")
    specs = {}
    for name, t in types.items():
        dev = device.get(name, t.dtype)
        specs[name] = BufferSpec(name, tuple(t.shape), t.dtype, dev, kinds[name], alias=aliases.get(name, ""))
    temps = [n for n in types if kinds[n] == "temp" and n in lives and n not in outputs and n not in aliases]
    offsets, scratch = place_in_arena([(n, specs[n].nbytes, tuple(lives[n])) for n in temps])
    buffers = tuple(BufferSpec(s.name, s.shape, s.dtype, s.device_dtype, s.kind, offsets.get(s.name), s.alias)
                    for s in specs.values())
    return LaunchPlan(buffers, tuple(launches), tuple(input_names), outputs, scratch)


def _tensor_maps(k: K.KernelFunc, bound: dict, types, device) -> tuple[TensorMapArg, ...]:
    """The launch's tensor maps: each maps the buffer bound to its kernel parameter, whose
    shape and device type must be the ones the kernel's copies were planned for."""
    out = []
    for t in k.tensor_maps:
        name = bound.get(t.buffer)
        if name is None:
            raise LaunchPlanError(f"kernel {k.name}: tensor map {t.name} maps {t.buffer}, which is no parameter")
        if tuple(types[name].shape) != tuple(t.shape):
            raise LaunchPlanError(f"kernel {k.name}: tensor map {t.name} was planned for a {t.shape} tensor; "
                                  f"buffer {name} is {tuple(types[name].shape)}")
        out.append(TensorMapArg(t.name, name, tensor_map_args(t.shape, device[name], t.box, t.swizzle)))
    return tuple(out)


def place_in_arena(items, align: int = ARENA_ALIGN) -> tuple[dict[str, int], int]:
    """Offsets for (name, nbytes, (first, last) launch) items so that two items whose
    launch intervals overlap never share a byte; first fit, largest first. Returns the
    offsets and the arena's size."""
    placed: list[tuple[int, int, int, int]] = []       # offset, end, first, last
    offsets: dict[str, int] = {}
    for name, nbytes, (first, last) in sorted(items, key=lambda it: (-it[1], it[2][0], it[0])):
        size = -(-max(nbytes, 1) // align) * align
        busy = sorted((o, e) for o, e, f, la in placed if f <= last and first <= la)
        at = 0
        for o, e in busy:
            if at + size <= o:
                break
            at = max(at, e)
        offsets[name] = at
        placed.append((at, at + size, first, last))
    return offsets, max((e for _, e, _, _ in placed), default=0)


def pack_args(launch: KernelLaunch, buffers) -> tuple:
    """The argument tuple of one launch: the buffer object (a device array, or anything
    mapped by name) of each parameter, in order."""
    try:
        return tuple(buffers[name] for name in launch.args)
    except KeyError as e:
        raise LaunchPlanError(f"kernel {launch.name}: no buffer for parameter {e.args[0]}") from None
