"""The tuner on a real GPU: the measured objective and the cost model's calibration."""
import pytest
from tune_programs import compiled

from deplokit.runtime.device import gpu_available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="needs a CUDA device")]


def test_gpu_objective_measures_every_trial(tmp_path):
    c = compiled("rms_norm")
    result = c.tune(budget=4, objective="gpu", cache=str(tmp_path / "t.db"))
    assert result.objective == "gpu"
    assert all(t.ok and t.cost_us > 0 for t in result.history)
    assert result.best.cost_us <= result.default.cost_us


def test_calibration_lowers_the_models_error_on_measurements(tmp_path):
    from deplokit.tune.calibrate import fit_constants, log_error, measure_samples
    from deplokit.tune.cost_model import CostConstants

    samples = []
    for name in ("rms_norm", "matmul_odd", "softmax"):
        samples += measure_samples(compiled(name), per_kernel=6)
    assert len(samples) >= 12 and all(s.measured_us > 0 for s in samples)
    target = compiled("rms_norm").target
    fitted, after = fit_constants(samples, target)
    assert after <= log_error(samples, target, CostConstants())
