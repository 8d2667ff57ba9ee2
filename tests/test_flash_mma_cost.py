"""The cost model on a half flash kernel on tensor cores (FlashPlan.mma): its Tile IR (001's
spelling of the record, flash_mma_tile.py) counts QK^T and PV as mma.sync work, and the
model prices that work at the target's dense tensor-core rate for the record's input type
(Target.tensor_tflops, as for an mma.sync matmul), not at the FP32 rate."""
import dataclasses

import pytest
import torch

import deplokit
from deplokit.tune.cost_model import compute_floor_us, estimate, roofline_us

F = torch.nn.functional
H, S, D = 2, 256, 64
MMA_FLOPS = 2 * 16 * 8 * 16          # one m16n8k16


def _compile(causal, mma="half", target="sm_90"):
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, H, S, D).to(torch.bfloat16) for _ in range(3))
    return deplokit.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v,
                            target=target, config={"fuse_attention.mma": mma})


def _kernel(c):
    (k,) = estimate(c.tile_ir, c.kernel_ir, c.target).kernels
    return k


@pytest.mark.parametrize("target", ["sm_90", "sm_120"])
def test_flash_on_tensor_cores_is_priced_from_its_mma_work(target):
    c = _compile(False, target=target)
    assert c.tile_ir.kernels[0].flash.mma is not None
    k = _kernel(c)
    w, t = k.work, c.target
    assert w.tensor_flops == 2 * S * S * (D + D) * H and w.tensor_dtype == "bf16"    # QK^T and PV, exactly
    rest = w.flops - w.tensor_flops                  # the softmax's FP32 work
    assert 0 < rest < w.tensor_flops / 10
    # at the whole GPU's rates, times the busiest SM's share: ceil(blocks / SMs) blocks at 1 / SMs of them
    busiest = t.sm_count * -(-w.blocks // t.sm_count) / w.blocks
    floor = (rest / (t.fp32_tflops * 1e6) + w.tensor_flops / (t.tensor_rate("bf16") * 1e6)) * busiest
    assert compute_floor_us(w, t) == pytest.approx(floor)
    assert roofline_us(w, t) >= w.tensor_flops / (t.tensor_rate("bf16") * 1e6)
    assert k.time_us >= k.sm_us >= floor
    # half the tensor-core rate: the mma part of the floor doubles, the rest stays
    slow = dataclasses.replace(t, tensor_tflops=tuple((d, r / 2) for d, r in t.tensor_tflops))
    assert compute_floor_us(w, slow) == pytest.approx(floor + w.tensor_flops / (t.tensor_rate("bf16") * 1e6) * busiest)
    # the same attention on FFMA (the knob off): no tensor-core work, floored at the FP32 rate
    f = _kernel(_compile(False, "off", target))
    assert f.work.tensor_flops == 0 and f.work.tensor_dtype == ""
    fma_floor = compute_floor_us(f.work, t)
    assert fma_floor >= f.work.flops / (t.fp32_tflops * 1e6) and fma_floor > 1.5 * floor   # sm_120: 2x


def test_a_causal_flash_kernel_counts_the_key_tiles_it_visits():
    c = _compile(True)
    fm = c.tile_ir.kernels[0].flash.mma
    tiles, per_tile = S // fm.key_tile, (D // 16) * (fm.key_tile // 8) + (fm.key_tile // 16) * (D // 8)
    visited = sum(min(tiles, (qb * fm.query_tile + fm.query_tile - 1) // fm.key_tile + 1)
                  for qb in range(S // fm.query_tile))
    w = _kernel(c).work
    assert w.tensor_flops == H * fm.row_warps * visited * per_tile * MMA_FLOPS
    assert w.tensor_flops < 0.6 * 2 * S * S * (D + D) * H       # about half the tiles


def test_a_causal_ffma_flash_kernel_counts_the_key_tiles_it_visits():
    """The FP32 flash kernel's key loop starts at a tile that depends on the block (it walks
    from the diagonal back): the count is the mean over the blocks, about half the keys."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, H, S, D) for _ in range(3))
    work = {causal: _kernel(deplokit.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                             q, k, v)).work
            for causal in (False, True)}
    assert 0.45 < work[True].flops / work[False].flops < 0.6
