"""The benchmark watchdog: hangs, crashes and CUDA-style sticky errors cost one job, not the
run, and the next job gets a working worker. No GPU needed."""
import pytest

from deplokit.runtime.worker import Watchdog, is_sticky_cuda_error

TARGET = "worker_targets:job"


@pytest.fixture
def dog():
    d = Watchdog(TARGET, timeout_s=60)
    yield d
    d.close()


def test_ok_jobs_share_one_worker(dog):
    a = dog.call("echo", 1)
    b = dog.call("echo", value=2)
    assert a.ok and b.ok
    assert a.value["value"] == 1 and b.value["value"] == 2
    assert a.value["pid"] == b.value["pid"]
    assert dog.restarts == 0


def test_exception_is_reported_and_worker_survives(dog):
    first = dog.call("echo").value["pid"]
    out = dog.call("raise", 7)
    assert out.status == "error"
    assert out.error == "ValueError: bad job 7"
    assert "Traceback" in out.detail
    assert dog.call("echo").value["pid"] == first
    assert dog.restarts == 0


def test_hang_times_out_and_next_job_runs(dog):
    first = dog.call("echo").value["pid"]
    out = dog.call("hang", timeout_s=1.5)
    assert out.status == "timeout"
    assert "1.5 s" in out.error
    assert 1.4 < out.seconds < 30
    after = dog.call("echo")
    assert after.ok and after.value["pid"] != first
    assert dog.restarts == 1


@pytest.mark.parametrize("kind, why", [("exit", "exited with status 3"), ("segv", "signal SIGSEGV")])
def test_crash_is_named_and_next_job_runs(dog, kind, why):
    out = dog.call(kind)
    assert out.status == "crash"
    assert why in out.error
    assert dog.call("echo", 5).value["value"] == 5


def test_sticky_cuda_error_replaces_the_worker(dog):
    first = dog.call("echo").value["pid"]
    out = dog.call("sticky")
    assert out.status == "error" and "illegal memory access" in out.error
    assert dog.call("echo").value["pid"] != first


def test_sticky_error_patterns():
    assert is_sticky_cuda_error("CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access")
    assert is_sticky_cuda_error("CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure")
    assert not is_sticky_cuda_error("ExecutionError: expected 2 inputs")


def test_bad_target_is_reported_not_a_hang():
    with Watchdog("no_such_module_xyz:job", timeout_s=60) as d:
        out = d.call()
        assert out.status == "crash"
        assert "could not load no_such_module_xyz:job: ModuleNotFoundError" in out.error


def test_job_timeout_does_not_count_worker_start_up(dog):
    # the first call starts the worker (imports deplokit and torch); a short limit still holds
    assert dog.call("echo", 1, timeout_s=2).ok
