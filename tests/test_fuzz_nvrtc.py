"""The fuzzer compiles with NVRTC in a worker process: a crash inside NVIDIA's compiler fails
one case instead of ending the campaign, and the next case gets a fresh worker."""
import pytest

from deplokit.errors import NvrtcCrash, NvrtcError
from deplokit.fuzz.isolated_nvrtc import IsolatedNvrtc
from deplokit.runtime.nvrtc import nvrtc_available

pytestmark = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not available")

GOOD = 'extern "C" __global__ void k(float* y) { y[threadIdx.x] = 2.0f * threadIdx.x; }'

# CUDA 13.0's front end segfaults on this kernel for sm_100/sm_120 (it compiles for sm_90, and
# without the launch bound); found by the fuzzer (seed 414 case 240, a guarded gather in a loop).
CRASHES_NVRTC_13_0 = """
extern "C" __global__ __launch_bounds__(32) void k(const float* __restrict__ a, const long long* __restrict__ x3,
                                                   const float* __restrict__ x4, float* __restrict__ out) {
    int tid = threadIdx.x;
    int a1 = tid % 3;
    int a0 = tid / 3;
    float acc0 = a[tid];
    for (int a3 = 0; a3 < 129; ++a3) {
        int idx1 = (int)x3[a0 * 3 + a1];
        float in3 = idx1 >= 0 && idx1 < 3 ? x4[min(max(idx1, 0), 2) * 129 + a3] : 0.0f;
        out[a0 * 387 + (a1 * 129 + a3)] = in3 + acc0;
    }
}
"""


@pytest.fixture
def worker():
    w = IsolatedNvrtc()
    yield w
    w.stop()


def test_a_killed_worker_is_replaced_and_errors_keep_their_class(worker):
    worker.compile(GOOD, "sm_90")
    first = worker.process.pid
    worker.process.kill()
    worker.process.join()
    worker.compile(GOOD, "sm_90")
    assert worker.process.pid != first
    with pytest.raises(NvrtcError):
        worker.compile(GOOD.replace("2.0f *", "2.0f * undeclared *"), "sm_90")
    worker.compile(GOOD, "sm_80")              # a rejected source leaves the worker serving


def test_a_compiler_crash_is_one_failed_case(worker):
    worker.compile(CRASHES_NVRTC_13_0, "sm_90")
    try:
        worker.compile(CRASHES_NVRTC_13_0, "sm_120")
    except NvrtcCrash as e:
        assert "crashed" in str(e) and "sm_120" in str(e)
    else:
        pytest.skip("this NVRTC compiles the kernel that crashes CUDA 13.0's")
    worker.compile(GOOD, "sm_120")             # the next case: a fresh worker
