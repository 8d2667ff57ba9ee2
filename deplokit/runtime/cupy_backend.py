"""The `cupy` backend: run a compiled program's kernels on a CUDA device.

The translation unit is compiled by NVRTC (runtime/nvrtc.py; nvcc where libnvrtc is
missing) for the device's own architecture and loaded as a module; the launch plan (runtime/launch_plan.py), decided on
the host, says which buffers to allocate, where temporaries sit in one scratch arena and
each launch's grid, block and arguments (a TMA kernel's tensor maps are encoded for the
device buffers on every run and passed by value after the buffers). Parameters and constants are uploaded once per
executor; inputs already on the device in the right type are used in place.

Only this module and runtime/bench.py touch CuPy; both import it lazily, so deplokit
imports (and its host-side tests run) without a GPU.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import ExecutionError
from ..ir.kernel_wgmma import uses_wgmma
from .device import require_gpu
from .launch_plan import STATIC_SMEM_LIMIT, LaunchPlan, build_plan, pack_args
from .nvcc import compile_cuda, nvcc_available
from .nvrtc import compile_nvrtc, nvrtc_available
from .rounding import round_to
from .signature import check_plan_matches_source
from .tensor_map import encode

# Bytes a device buffer's address must be a multiple of: float4 loads and stores, cp.async of
# 16 bytes and TMA bulk copies (cp.async.bulk) all fault on anything less. Fresh allocations
# (CuPy's pool, torch's caching allocator) are 256-byte aligned; a view into a tensor may not be.
DEVICE_ALIGN = 16


def device_address(array) -> int:
    """The address of a device array's first element (CuPy: .data.ptr; the host tests'
    stand-in arrays are numpy: .ctypes.data)."""
    ptr = getattr(getattr(array, "data", None), "ptr", None)
    return int(ptr if ptr is not None else array.ctypes.data)


def device_arch(cupy=None) -> tuple[str, int]:
    """(`sm_XY`, XY) of the current CUDA device."""
    if cupy is None:
        import cupy
    cc = int(cupy.cuda.Device().compute_capability)
    return f"sm_{cc}", cc


def check_device_supports(target, cc: int) -> None:
    """A program scheduled for `target` uses its features (TMA on sm_90, ...): it runs only on
    a device at least as new."""
    if cc < target.sm:
        raise ExecutionError(f"the program was compiled for {target.name} but the CUDA device is sm_{cc}; "
                             f"compile it with target='sm_{cc}' (or the nearest older target)")


def compile_cubin(cuda_source: str, arch: str) -> bytes:
    """The cubin of the translation unit: NVRTC when libnvrtc loads, else nvcc -cubin."""
    if nvrtc_available():
        return compile_nvrtc(cuda_source, arch).cubin
    if not nvcc_available():
        raise ExecutionError("backend='cupy' needs NVRTC (pip install nvidia-cuda-nvrtc) or nvcc to compile kernels")
    return compile_cuda(cuda_source, arch).cubin


# The numpy type a device buffer of each dtype is held in: a bf16 element as its 16-bit word
# (numpy has no bfloat16; DLPack carries it as int16), the rest as themselves.
_STORAGE = {"bfloat16": np.uint16, "float16": np.float16}


def storage_dtype(dtype: str):
    """The numpy type of a device buffer of `dtype`."""
    return np.dtype(_STORAGE.get(dtype, dtype))


def half_to_storage(array, dtype: str) -> np.ndarray:
    """Host values of a half tensor (float32, each exact in `dtype`) as the device's words."""
    if dtype == "bfloat16":
        bits = round_to(array, "bfloat16").view(np.uint32)
        return (bits >> np.uint32(16)).astype(np.uint16)
    return np.asarray(array, dtype=np.float32).astype(np.float16)


def storage_to_torch(words: np.ndarray, dtype: str) -> torch.Tensor:
    """A device buffer's words, copied to the host, as a torch tensor of `dtype`."""
    if dtype == "bfloat16":
        values = (words.astype(np.uint32) << np.uint32(16)).view(np.float32)
        return torch.from_numpy(values).to(torch.bfloat16)
    return torch.from_numpy(words)


def device_ready(t: torch.Tensor, dtype: str) -> torch.Tensor:
    """`t` as the kernels read it: contiguous, of element type `dtype`, its first element on a
    DEVICE_ALIGN boundary (a view such as `x[1:]` is copied; a tensor already so is used in place)."""
    t = t.detach().to(getattr(torch, dtype)).contiguous()
    if t.data_ptr() % DEVICE_ALIGN:
        t = t.clone()
    return t


class CupyExecutor:
    """Loaded kernels plus the device copies of a compilation's parameters and constants."""

    def __init__(self, kernel_program, cuda_source: str, input_names, values: dict, target, cupy=None,
                 launches=(), whole=None, encode_tensor_map=encode):
        # `cupy` may be a stand-in with CuPy's interface (the host-side tests run the whole
        # backend with numpy arrays and the simulator for kernels); by default, CuPy itself.
        if cupy is None:
            require_gpu("backend='cupy'")
            import cupy
        self.cupy = cupy
        self.encode_tensor_map = encode_tensor_map     # (TensorMapArgs, address) -> the map, by value
        # a deduplicated program: `launches` bind its unique kernels to each launch's tensors
        self.plan: LaunchPlan = build_plan(kernel_program, input_names, target, launches, whole)
        check_plan_matches_source(self.plan, cuda_source)
        self.arch, cc = device_arch(cupy)
        check_device_supports(target, cc)
        # wgmma exists only in the architecture-specific PTX of the device (sm_90a)
        arch = self.arch + "a" if any(uses_wgmma(k) for k in kernel_program.kernels) else self.arch
        self.cubin = compile_cubin(cuda_source, arch)
        self.module = cupy.cuda.function.Module()
        try:
            self.module.load(self.cubin)
        except Exception as e:      # a driver older than the NVRTC that built the cubin, typically
            raise ExecutionError(f"the CUDA driver could not load the cubin NVRTC built for {self.arch}: "
                                 f"{type(e).__name__}: {e}") from None
        self.functions = {ln.name: self.module.get_function(ln.name) for ln in self.plan.launches}
        self._opt_in_dynamic_smem()
        used = self.used = {a for ln in self.plan.launches for a in ln.args}
        # in-place writes: written buffer -> the state buffer whose memory it is (a KV cache)
        self.aliases = {b.name: b.alias for b in self.plan.buffers if b.alias}
        self.state_names = tuple(dict.fromkeys(self.aliases.values()))
        self.constants = {name: self._upload(np.asarray(v), self.plan.buffer(name))
                          for name, v in values.items() if name in used and name not in self.state_names}
        self.initial_state = {name: np.asarray(values[name]) for name in self.state_names}

    def new_state(self) -> dict:
        """Device copies of the state buffers' initial values (a fresh KV cache)."""
        return {name: self._upload(v, self.plan.buffer(name)) for name, v in self.initial_state.items()}

    def _opt_in_dynamic_smem(self) -> None:
        """A launch whose static and dynamic shared memory exceed 48 KiB fails unless the
        kernel's maximum was raised first (cudaFuncAttributeMaxDynamicSharedMemorySize)."""
        for ln in self.plan.launches:
            if ln.dynamic_smem and ln.dynamic_smem + ln.static_smem > STATIC_SMEM_LIMIT:
                driver = self.cupy.cuda.driver
                driver.funcSetAttribute(self.functions[ln.name].ptr,
                                        driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, ln.dynamic_smem)

    # -- buffers ----------------------------------------------------------------------------
    def _upload(self, array, spec):
        """A device array of `spec`'s device type and flat shape holding `array`."""
        cp = self.cupy
        if isinstance(array, torch.Tensor):
            array = array.detach()
            if array.is_cuda:       # converted by torch, so DLPack only ever sees the storage type
                ready = device_ready(array, spec.device_dtype)
                if ready.dtype == torch.bool:       # bool crosses DLPack as bytes
                    return cp.from_dlpack(ready.view(torch.uint8)).view(np.bool_).reshape(-1)
                if ready.dtype == torch.bfloat16:   # bf16 crosses as its 16-bit words
                    return cp.from_dlpack(ready.view(torch.int16)).view(np.uint16).reshape(-1)
                return cp.from_dlpack(ready).reshape(-1)
            array = array.contiguous()
            array = (array.float() if array.dtype in (torch.bfloat16, torch.float16) else array).numpy()
        if spec.device_dtype in _STORAGE:
            array = half_to_storage(array, spec.device_dtype)
        arr = cp.asarray(np.ascontiguousarray(array))
        if arr.dtype != storage_dtype(spec.device_dtype):
            arr = arr.astype(storage_dtype(spec.device_dtype))
        return cp.ascontiguousarray(arr.reshape(-1))

    def prepare(self, inputs, state: dict | None = None) -> dict:
        """Every buffer the launches name, by name: constants, the inputs (on the device, in
        their storage type), fresh outputs, and views of one scratch arena for temporaries.
        `state` (from new_state) is the state the program updates in place; a fresh one by default."""
        cp = self.cupy
        plan = self.plan
        if len(inputs) != len(plan.inputs):
            raise ExecutionError(f"expected {len(plan.inputs)} inputs ({', '.join(plan.inputs)}), got {len(inputs)}")
        bufs = dict(self.constants)
        bufs.update(self.new_state() if state is None else state)
        for name, target in self.aliases.items():
            bufs[name] = bufs[target]
        for name, t in zip(plan.inputs, inputs):
            spec = plan.buffer(name)
            if not isinstance(t, torch.Tensor):
                raise ExecutionError(f"input {name} must be a torch.Tensor, got {type(t).__name__}")
            got = str(t.dtype).replace("torch.", "")
            if tuple(t.shape) != spec.shape or got != spec.dtype:
                raise ExecutionError(f"input {name} has shape {tuple(t.shape)} {got}; compiled for "
                                     f"{spec.shape} {spec.dtype}")
            bufs[name] = self._upload(t, spec)
        arena = cp.empty(max(plan.scratch_bytes, 1), dtype=cp.uint8)
        for spec in plan.buffers:
            if spec.name in bufs or (spec.name not in self.used and spec.name not in plan.outputs):
                continue
            if spec.offset is not None:
                bufs[spec.name] = arena[spec.offset:spec.offset + spec.nbytes].view(storage_dtype(spec.device_dtype))
            elif spec.kind == "counter":    # split-K's arrival counters: zero; each launch leaves them zero
                bufs[spec.name] = cp.zeros(spec.numel, dtype=storage_dtype(spec.device_dtype))
            else:   # outputs (and a written buffer no temp slot was planned for); kernels zero what they accumulate
                bufs[spec.name] = cp.empty(spec.numel, dtype=storage_dtype(spec.device_dtype))
        bufs["__arena__"] = arena           # keeps the views' memory alive with the dict
        bufs["__tensor_maps__"] = {i: tuple(self.encode_tensor_map(t.args, device_address(bufs[t.buffer]))
                                            for t in ln.tensor_maps)
                                   for i, ln in enumerate(plan.launches) if ln.tensor_maps}
        return bufs

    # -- launches ---------------------------------------------------------------------------
    def launch(self, bufs: dict, between=None) -> None:
        """Launch every kernel in order on the current stream; `between(i)` is called before
        launch i and, with i = number of launches, after the last (per-kernel timing)."""
        for i, ln in enumerate(self.plan.launches):
            if between is not None:
                between(i)
            args = pack_args(ln, bufs) + bufs["__tensor_maps__"].get(i, ())
            self.functions[ln.name](ln.grid, ln.block, args, shared_mem=ln.dynamic_smem)
        if between is not None:
            between(len(self.plan.launches))

    def outputs(self, bufs: dict, on_device: bool) -> list[torch.Tensor]:
        """The program's outputs as torch tensors in their shapes and dtypes: on the GPU when
        `on_device` (zero-copy through DLPack), else copied to the host."""
        out = []
        for name in self.plan.outputs:
            spec = self.plan.buffer(name)
            arr = bufs[name].reshape(spec.shape)
            if on_device:       # bool never crosses DLPack (not every producer/consumer pair has it)
                if spec.device_dtype == "bfloat16":
                    out.append(torch.from_dlpack(arr.view(np.int16)).view(torch.bfloat16))
                    continue
                t = torch.from_dlpack(arr.view(np.uint8) if arr.dtype == np.bool_ else arr)
                out.append(t != 0 if spec.dtype == "bool" else t.to(getattr(torch, spec.dtype)))
                continue
            if spec.device_dtype in _STORAGE:
                out.append(storage_to_torch(self.cupy.asnumpy(arr), spec.device_dtype))
                continue
            if spec.dtype == "bool":
                arr = arr != 0
            elif arr.dtype != np.dtype(spec.dtype):
                arr = arr.astype(spec.dtype)
            out.append(torch.from_numpy(self.cupy.asnumpy(arr)))
        return out

    def run(self, inputs, state: dict | None = None) -> list[torch.Tensor]:
        """Run on `inputs` (torch tensors, host or device); outputs where the inputs were (on
        the device if any input is). `state`: as in prepare, updated in place."""
        on_device = any(isinstance(t, torch.Tensor) and t.is_cuda for t in inputs)
        if on_device:
            torch.cuda.synchronize()        # inputs written on torch's stream are complete
        bufs = self.prepare(inputs, state)
        self.launch(bufs)
        self.cupy.cuda.get_current_stream().synchronize()
        outs = self.outputs(bufs, on_device)
        return outs

    # -- what the driver says about each kernel ---------------------------------------------
    def function_attributes(self, name: str) -> dict:
        """Registers, static shared memory and local memory of a loaded kernel, from the driver."""
        from cupy.cuda import driver
        fn = self.functions[name]
        get = driver.funcGetAttribute
        return {"registers": get(driver.CU_FUNC_ATTRIBUTE_NUM_REGS, fn.ptr),
                "smem_bytes": get(driver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn.ptr),
                "local_bytes": get(driver.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn.ptr)}

    def occupancy(self, name: str) -> float:
        """Resident warps / the SM's maximum, from the driver's occupancy calculator."""
        from cupy.cuda import driver, runtime
        ln = next(x for x in self.plan.launches if x.name == name)
        blocks = driver.occupancyMaxActiveBlocksPerMultiprocessor(self.functions[name].ptr, ln.threads,
                                                                  ln.dynamic_smem)
        props = runtime.getDeviceProperties(self.cupy.cuda.Device().id)
        warps = -(-ln.threads // 32)
        return blocks * warps / (props["maxThreadsPerMultiProcessor"] // 32)
