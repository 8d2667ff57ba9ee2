"""011's repack of operands whose rows are not 16 bytes apart (passes/repack/repack.py): the
matmul stages a zero-padded copy through a tensor map; the copy kernel runs just before it."""
from __future__ import annotations

import ctypes
import dataclasses

import pytest
import torch

import deplokit
from deplokit.ir.tile_ir import Stage, walk
from deplokit.passes.repack.repack import misaligned_rows, padded_shape, repack_cost
from deplokit.passes.verify import IRInvariantError, verify
from deplokit.runtime.launch_plan import build_plan
from deplokit.runtime.nvcc import nvcc_available
from deplokit.runtime.tensor_map import encode
from deplokit.target import get_target
from deplokit.trace import format_step

TMA = {"011_tma_copy.enable": True}           # small register blocks stay on cp.async by default
FORCED = {**TMA, "011_tma_copy.repack": True}


def _matmul(m, k, n, target="sm_90", config=None, seed=0):
    torch.manual_seed(seed)
    a, b = torch.randn(m, k), torch.randn(k, n)
    return deplokit.compile(torch.matmul, a, b, target=target, config=config or {}), (a, b)


def _stages(kernel):
    return [s for s, _ in walk(kernel.body) if isinstance(s, Stage)]


def _step(c):
    return next(s for s in c.trace if s.name == "011_tma_copy")


def test_padded_rows_are_whole_16_byte_units():
    assert misaligned_rows((1000, 777), "float32") and not misaligned_rows((1000, 776), "float32")
    assert not misaligned_rows((777,), "float32") and not misaligned_rows((3, 5), "int64")
    assert padded_shape((1000, 777)) == (1000, 780) and padded_shape((3, 20, 101)) == (3, 20, 104)


def test_both_operands_staged_from_workspaces_filled_first():
    c, _ = _matmul(40, 37, 45, config=FORCED)        # K tail of 5 after two chunks of 16
    names = [k.name for k in c.tile_ir.kernels]
    assert names == ["merged_matmul_repack_x0", "merged_matmul_repack_x1", "merged_matmul"]
    main = c.tile_ir.kernel("merged_matmul")
    assert [(r.tensor, r.workspace, r.shape) for r in main.repacks] == [
        ("x0", "merged_matmul_x0_padded", (40, 40)), ("x1", "merged_matmul_x1_padded", (37, 48))]
    tma = [s for s in _stages(main) if s.copy == "tma"]
    assert sorted(s.tensor for s in tma) == ["merged_matmul_x0_padded", "merged_matmul_x1_padded"]
    # the K tail is not a TMA stage: it keeps reading the operands themselves
    assert {s.tensor for s in _stages(main) if s.copy != "tma"} == {"x0", "x1"}
    assert all(c.tile_ir.kernel(n).repacks_for == "merged_matmul" for n in names[:2])
    assert "repack x0 into merged_matmul_x0_padded[40, 40] by merged_matmul_repack_x0" in str(c.tile_ir)
    assert [k.repacks_for for k in c.kernel_ir.kernels] == ["merged_matmul", "merged_matmul", ""]
    assert "# repacks an operand of merged_matmul into 16-byte rows" in str(c.kernel_ir)


def test_the_repacked_matmul_is_the_cp_async_one_bit_for_bit():
    c, (a, b) = _matmul(40, 37, 45, config=FORCED)
    plain, _ = _matmul(40, 37, 45, config={**TMA, "011_tma_copy.repack": False})
    assert not any(k.repacks for k in plain.tile_ir.kernels)
    first, second = c.run(a, b, backend="sim"), c.run(a, b, backend="sim")
    assert torch.equal(first, second)                        # run to run
    assert torch.equal(first, plain.run(a, b, backend="sim"))   # the same sums in the same order
    assert c.check(a, b, backend="sim").ok                  # and eager's result


def test_split_k_with_a_weight_and_an_activation_repacked_and_deduplicated():
    torch.manual_seed(1)
    lin, x = torch.nn.Linear(101, 37), torch.randn(3, 20, 101)
    config = {**FORCED, "003_split_matmul_k.splits": 2}
    c = deplokit.compile(lin, x, target="sm_90", config=config, dedup=True)
    main = c.tile_ir.kernel("merged_linear")
    assert main.split_k is not None and {r.tensor for r in main.repacks} == {"input", "p_weight"}
    assert [k.name for k in c.kernel_ir.kernels] == ["merged_linear_repack_input", "merged_linear_repack_p_weight",
                                                    "merged_linear", "merged_linear_reduce"]
    plain = deplokit.compile(lin, x, target="sm_90", config={**config, "011_tma_copy.repack": False}, dedup=True)
    out = c.run(x, backend="sim")
    assert torch.equal(out, c.run(x, backend="sim")) and torch.equal(out, plain.run(x, backend="sim"))
    assert c.check(x, backend="sim").ok


def test_every_pass_of_the_repacked_schedule_runs_correctly():
    c, (a, b) = _matmul(40, 37, 45, config=FORCED)
    checks = c.check_passes(a, b)
    assert checks and all(pc.result.ok for pc in checks), [str(pc) for pc in checks if not pc.result.ok]
    assert any(pc.name == "011_tma_copy" and not pc.skipped for pc in checks)


def test_the_launch_plan_places_the_workspace_and_encodes_its_map():
    c, _ = _matmul(40, 37, 45, config=FORCED)
    plan = build_plan(c.kernel_ir, c.input_names, c.target)
    ws = plan.buffer("merged_matmul_x1_padded")
    assert (ws.shape, ws.kind) == ((37, 48), "temp") and ws.offset is not None and ws.offset % 256 == 0
    assert plan.scratch_bytes >= ws.offset + ws.nbytes
    assert [ln.name for ln in plan.launches][:2] == ["merged_matmul_repack_x0", "merged_matmul_repack_x1"]
    (main,) = [ln for ln in plan.launches if ln.tensor_maps]
    maps = {t.buffer: t.args for t in main.tensor_maps}
    a, b = maps["merged_matmul_x0_padded"], maps["merged_matmul_x1_padded"]
    assert (a.global_dims, a.global_strides) == ((40, 40), (160,))     # innermost first, bytes
    assert (b.global_dims, b.global_strides) == ((48, 37), (192,))
    stage = {s.tensor: s for s in _stages(c.tile_ir.kernel("merged_matmul")) if s.copy == "tma"}
    assert b.box_dims == stage["merged_matmul_x1_padded"].tma.box[::-1]
    calls = []

    class Driver:       # libcuda's cuTensorMapEncodeTiled as the host calls it
        def cuTensorMapEncodeTiled(self, out, dtype, rank, address, dims, strides, box, *rest):
            n = rank.value
            calls.append((dtype.value, tuple(dims[:n]), tuple(strides[:n - 1]), tuple(box[:n])))
            ctypes.memset(out.value, 0, 128)
            return 0

    encode(b, 0x7f0000000100, Driver())
    assert calls == [(7, (48, 37), (192,), b.box_dims)]


def test_targets_without_tma_keep_cp_async():
    for target in ("sm_80", "sm_120"):
        c, _ = _matmul(40, 37, 45, target=target, config=FORCED)
        assert [k.name for k in c.kernel_ir.kernels] == ["merged_matmul"], target
        assert "_padded" not in str(c.cuda) and "no TMA" in _step(c).skipped_reason


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
def test_nvcc_builds_the_repacked_program_for_each_target():
    for target in ("sm_80", "sm_90", "sm_120"):
        c, _ = _matmul(40, 37, 45, target=target, config=FORCED)
        stats = c.nvcc().stats
        assert set(stats) == {k.name for k in c.kernel_ir.kernels} and all(s.spills == 0 for s in stats.values())
        assert ("merged_matmul_repack_x0" in stats) == (target == "sm_90")


def test_the_decision_is_by_cost_and_the_trace_says_why():
    sm90 = get_target("sm_90")
    big, _ = _matmul(4095, 4095, 4095)                    # the main loop dwarfs the repack
    main = big.tile_ir.kernel("merged_matmul")
    assert {r.tensor for r in main.repacks} == {"x0", "x1"}
    note = next(d.note for d in _step(big).decisions if d.kernel == "merged_matmul")
    assert "staged from merged_matmul_x0_padded (4095, 4096)" in note and "saves ~" in note
    text = "\n".join(format_step(_step(big)))
    assert "merged_matmul_repack_x0" in text and "saves ~" in text
    before = _step(big).before.kernel("merged_matmul")          # as 011 sees it
    stage = next(s for s in _stages(before) if s.tensor == "x0" and s.buffers >= 2)
    cost = repack_cost(before, stage, (4095, 4095), sm90)
    assert cost.pays and cost.extra_bytes == 4 * (4095 * 4095 + 4095 * 4096)
    assert f"saves ~{cost.saved_us:.1f} us" in note
    small, _ = _matmul(513, 1000, 999)                    # x1's 999-float rows: the repack costs more
    assert not any(k.repacks for k in small.tile_ir.kernels)
    why = "\n".join(format_step(_step(small)))
    assert "x1's rows are 3996 bytes apart" in why and "not repacked: saves ~" in why


def test_the_knob_turns_it_off():
    c, _ = _matmul(4095, 4095, 4095, config={"011_tma_copy.repack": False})
    assert not any(k.repacks for k in c.tile_ir.kernels)
    assert "rows are 16380 bytes apart, not a multiple of 16" in _step(c).skipped_reason


def test_the_verifier_wants_the_repack_kernel_before_its_matmul():
    c, _ = _matmul(40, 37, 45, config=FORCED)
    verify(c.tile_ir)
    program = c.tile_ir
    dropped = dataclasses.replace(program, kernels=program.kernels[1:])
    with pytest.raises(IRInvariantError, match="repack kernel merged_matmul_repack_x0 does not run before it"):
        verify(dropped)


@pytest.mark.gpu
def test_the_repacked_matmul_runs_on_the_gpu():
    from deplokit.runtime.device import gpu_available
    if not gpu_available():
        pytest.skip("no CUDA device")
    c, (a, b) = _matmul(1000, 777, 1531, config={"011_tma_copy.repack": True})
    assert any(k.repacks for k in c.tile_ir.kernels)
    assert c.check(a, b, backend="cupy").ok


def test_a_tuner_leaf_that_repacks_runs_after_its_repack_kernels():
    from deplokit.tune.objective import ModelObjective
    from deplokit.tune.space import KernelSpace
    c, _ = _matmul(40, 37, 45, config=FORCED)
    space = KernelSpace(c.loop_ir, "merged_matmul", c.target,
                        fixed={f"{p}": v for p, v in c.tile_ir.kernel("merged_matmul").knobs})
    _, leaf = next(iter(space.leaves(4)))
    program = space.program_with(leaf)
    assert [k.name for k in program.kernels] == ["merged_matmul_repack_x0", "merged_matmul_repack_x1", "merged_matmul"]
    verify(program)
    assert ModelObjective(c.target, ptxas=False)(space, leaf) > 0
