"""Every kernel the schedule emits for the test corpus compiles with nvcc for sm_80,
sm_90 and sm_120, and ptxas's registers, shared memory and spills land on each kernel."""
import pytest
from programs import config_of, corpus

import deplokit
from deplokit.ir import kernel_ir as K
from deplokit.ir.kernel_tma import MbarrierInit
from deplokit.ir.types import ctype_bytes
from deplokit.runtime.nvcc import annotate_program, nvcc_available

pytestmark = pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
PROGRAMS = corpus()


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_emitted_cuda_compiles(name, target):
    fn, inputs = PROGRAMS[name]
    c = deplokit.compile(fn, *inputs, target=target, config=config_of(PROGRAMS[name]))
    text = str(c.cuda)
    assert text.count('extern "C" __global__') == len(c.kernel_ir.kernels)
    assert text.count("__launch_bounds__(") == len(c.kernel_ir.kernels)
    result = c.nvcc()
    assert result.arch == target
    for k in annotate_program(c.kernel_ir, result).kernels:
        assert k.registers is not None and 0 < k.registers <= 255, k.name
        assert k.spills == 0, (k.name, k.spills)
        arrays = list(_shared_arrays(k.body))
        mbarriers = {s.name for s in _walk(k.body) if isinstance(s, MbarrierInit)}
        declared = sum(ctype_bytes(s.ctype) * s.size for s in arrays) + 8 * len(mbarriers)   # an mbarrier: 8 bytes
        # each array is aligned (16 bytes, a TMA box's 1024), so ptxas may count up to
        # align - 4 bytes of padding before each array
        assert declared <= k.smem_bytes <= declared + sum(s.align - 4 for s in arrays), \
            (k.name, k.smem_bytes, declared)
        assert k.smem_bytes <= K.declared_smem_bytes(k), (k.name, k.smem_bytes)    # the plan's bound holds


def _walk(body):
    for s in body:
        yield s
        for child in ("body", "then", "orelse"):
            yield from _walk(getattr(s, child, ()))


def _shared_arrays(body):
    from deplokit.ir import kernel_ir as K
    for s in body:
        if isinstance(s, K.SharedArray):
            yield s
        for child in ("body", "then", "orelse"):
            yield from _shared_arrays(getattr(s, child, ()))


def test_nvcc_error_shows_message_and_source_line():
    from deplokit.runtime.nvcc import NvccError, compile_cuda
    source = 'extern "C" __global__ void k(float* y) {\n    y[0] = undefined_name;\n}\n'
    with pytest.raises(NvccError) as e:
        compile_cuda(source, "sm_90")
    assert "undefined_name" in str(e.value) and "y[0] = undefined_name;" in str(e.value)
