"""The core alone: every advanced feature (deplokit/passes/features.py) switched off by
config, and the core's programs still compile and match PyTorch on the loop interpreter and
the simulator: RMSNorm, softmax, a matmul (one large enough that split-K and TMA would
apply), a long reduction of few rows (split-reduce would apply), attention (flash would),
a tf32 matmul (tensor cores would) and a tiny Llama decoder layer; with cp.async off too, a
stage is copied by the threads' ordinary loads and stores."""
import pytest
import torch
import torch.nn.functional as F

import deplokit
from deplokit.ir.tile_ir import walk
from deplokit.passes.features import ADVANCED, core_config

torch.manual_seed(0)
PROGRAMS = {
    "rms_norm": (torch.nn.RMSNorm(64), (torch.randn(4, 64),)),
    "softmax": (lambda x: torch.softmax(x, -1), (torch.randn(4, 256),)),
    "matmul": (lambda a, b: a @ b, (torch.randn(16, 1024), torch.randn(1024, 16))),
    "long_rows": (lambda x: torch.softmax(x, -1), (torch.randn(2, 20000),)),
    "attention": (F.scaled_dot_product_attention, (torch.randn(1, 1, 64, 32),) * 3),
}
ADVANCED_STEPS = ("fuse_attention", "fuse_rows", "split_reduce", "003_split_matmul_k", "011_tma_copy",
                  "012_swizzle_smem", "013_async_copy")


def only_the_core(c):
    steps = {s.name: s for s in c.trace}
    assert all(not steps[n].changed for n in ADVANCED_STEPS), [n for n in ADVANCED_STEPS if steps[n].changed]
    kinds = {type(s).__name__ for k in c.tile_ir.kernels for s, _ in walk(k.body)}
    assert not {n for n in kinds if n.startswith(("Tma", "Async")) or n in ("MmaSync", "FragmentLoad")}
    assert all(k.mma is None for k in c.tile_ir.kernels)
    assert all(getattr(k, "flash", None) is None for k in c.tile_ir.kernels)


def test_the_switches_are_pass_knobs_and_one_can_stay_on():
    c = deplokit.compile(*PROGRAMS["matmul"][:1], *PROGRAMS["matmul"][1], config=core_config())
    assert c.check(backend="sim").ok
    assert "011_tma_copy.enable" not in core_config(tma=True) and "fuse_attention.enable" in core_config(tma=True)
    with pytest.raises(ValueError, match="no advanced feature"):
        core_config(warp_specialise=True)
    assert set(core_config()) == {k for cfg in ADVANCED.values() for k in cfg}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_core_alone_matches_torch(name):
    fn, inputs = PROGRAMS[name]
    c = deplokit.compile(fn, *inputs, config=core_config())
    only_the_core(c)
    assert c.check(backend="loop").ok and c.check(backend="sim").ok
    # with the features on, the same program does use one (so the switch is what turned it off)
    if name in ("matmul", "long_rows", "attention"):
        on = deplokit.compile(fn, *inputs)
        assert any(s.changed for s in on.trace if s.name in ADVANCED_STEPS)


def test_tensor_cores_are_switched_off_too():
    """A tf32 matmul runs on tensor cores by default; with the core alone, as FMAs of its
    tf32-rounded operands, the same numbers within tf32's rounding."""
    a, b = torch.randn(64, 32), torch.randn(32, 48)
    on = deplokit.compile(lambda a, b: a @ b, a, b, precision="tf32")
    assert on.tile_ir.kernels[0].mma is not None
    off = deplokit.compile(lambda a, b: a @ b, a, b, precision="tf32", config=core_config())
    only_the_core(off)
    assert off.check(backend="sim").ok


def test_a_tiny_llama_layer_with_the_core_alone():
    transformers = pytest.importorskip("transformers")  # noqa: F841
    from deplokit.frontend import hf, models
    from deplokit.frontend.presets import PRESETS
    preset = models.tiny(PRESETS["TinyLlama/TinyLlama-1.1B-Chat-v1.0"], layers=1, hidden=32, heads=2,
                         kv_heads=1, intermediate=40, vocab=64)
    model = hf.build_causal_lm(hf.config_from_preset(preset), preset.arch)
    ids = torch.randint(0, preset.vocab, (1, 5))
    c = deplokit.compile(model, ids, config=core_config())
    only_the_core(c)
    assert c.check(backend="loop").ok and c.check(backend="sim").ok
