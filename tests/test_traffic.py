"""Bytes and FLOPs read off the IR, and theoretical occupancy, against hand-computed values."""
import pytest
import torch
from torch import nn

import deplokit
from deplokit.analysis.occupancy import occupancy
from deplokit.analysis.traffic import kernel_func_bytes, loop_kernel_cost, program_cost, program_kernel_costs
from deplokit.target import TARGETS


@pytest.mark.parametrize("reduce", ["in_kernel", "reducer"])
def test_matmul_costs_2mnk_flops_and_each_operand_once(reduce):
    M, K, N = 32, 256, 64
    c = deplokit.compile(lambda a, b: a @ b, torch.randn(1, M, K), torch.randn(K, N),
                         config={"003_split_matmul_k.reduce": reduce})
    (k,) = c.loop_ir.kernels
    cost = loop_kernel_cost(k, c.loop_ir.types())
    assert cost.flops == 2 * M * N * K
    assert cost.bytes_read == 4 * (M * K + K * N)
    assert cost.bytes_written == 4 * M * N
    assert cost.intensity == pytest.approx(2 * M * N * K / (4 * (M * K + K * N + M * N)))
    # Kernel IR: split-K (4 splits here) writes 4 partial tiles; the last block of each tile
    # (a counter per tile) or a reducer kernel reads them back and writes the output once
    costs = program_kernel_costs(c.kernel_ir, c.loop_ir)
    assert [x.name for x in costs] == [kf.name for kf in c.kernel_ir.kernels]
    by_name = {x.name: x for x in costs}
    assert by_name["merged_matmul"].flops == 2 * M * N * K
    split = c.tile_ir.kernels[0].split_k
    S = split.splits
    assert S == 4 and split.reduce == reduce
    gemm = by_name["merged_matmul"]
    if reduce == "in_kernel":
        assert len(costs) == 1
        (counter,) = [p for p in c.kernel_ir.kernels[0].params if p.name == split.counter]
        assert counter.ctype == "int32" and counter.size <= M * N      # at most one per output element
        assert (gemm.bytes_read, gemm.bytes_written) == (4 * (M * K + K * N), 4 * (S * M * N + M * N + counter.size))
    else:
        assert (gemm.bytes_read, gemm.bytes_written) == (4 * (M * K + K * N), 4 * S * M * N)
        assert (by_name["merged_matmul_reduce"].bytes_read, by_name["merged_matmul_reduce"].bytes_written) == \
            (4 * S * M * N, 4 * M * N)
    total = program_cost(c.loop_ir)
    assert (total.bytes, total.flops) == (4 * (M * K + K * N + M * N), 2 * M * N * K)


def test_rmsnorm_costs():
    R, H = 8, 64
    c = deplokit.compile(nn.RMSNorm(H), torch.randn(1, R, H))
    total = program_cost(c.loop_ir)
    # square + accumulate over H, then divide, add eps, rsqrt per row, then two multiplies per element
    assert total.flops == R * (2 * H + 3 + 2 * H)
    assert total.bytes_read == 4 * (R * H + H)
    assert total.bytes_written == 4 * R * H


def test_pointwise_costs_and_comparisons_are_not_flops():
    c = deplokit.compile(lambda x, y: torch.relu(x + y), torch.randn(8, 64), torch.randn(64))
    total = program_cost(c.loop_ir)
    assert total.flops == 2 * 8 * 64                       # add, relu
    assert total.bytes == 4 * (8 * 64 + 64 + 8 * 64)
    c = deplokit.compile(lambda x, y: torch.where(x > 0, y, 0.0), torch.randn(8, 64), torch.randn(8, 64))
    assert program_cost(c.loop_ir).flops == 0               # a compare and a select


def test_temporaries_are_not_program_traffic_but_are_kernel_traffic():
    q, k, v = torch.randn(1, 4, 16, 8), torch.randn(1, 4, 16, 8), torch.randn(1, 4, 16, 8)
    # row fusion off: the scores and probabilities are global temporaries between kernels
    c = deplokit.compile(lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), -1) @ v, q, k, v,
                         config={"fuse_rows.enable": False, "fuse_attention.enable": False})
    total = program_cost(c.loop_ir)
    assert total.bytes == 4 * (3 * 4 * 16 * 8 + 4 * 16 * 8)
    kernel_bytes = sum(x.bytes for x in program_kernel_costs(c.kernel_ir, c.loop_ir))
    assert kernel_bytes > total.bytes                       # the scores go out and come back


def test_kernel_func_bytes_by_ctype():
    from deplokit.ir.kernel_ir import KernelFunc, Param
    kf = KernelFunc("k", (Param("ids", "int64", True, 10), Param("w", "float", True, 100),
                          Param("out", "float", False, 40)), (1, 1, 1), (32, 1, 1), ())
    assert kernel_func_bytes(kf) == (80 + 400, 160)


@pytest.mark.parametrize("threads, regs, smem, blocks, warps, limiter", [
    (256, 32, 0, 8, 64, "threads"),          # 2048 / 256 threads
    (256, 64, 0, 4, 32, "registers"),        # 64 regs x 32 lanes = 2048 per warp; 65536 / 2048 = 32 warps
    (128, 32, 48 * 1024, 4, 16, "smem"),     # 228 KB / (48 KB + 1 KB reserved) = 4
    (32, 16, 0, 32, 32, "blocks"),           # 32 block slots
    (100, 255, 0, 2, 8, "registers"),        # 4 warps x 8192 regs (255 rounds to 256 x 32)
])
def test_occupancy_h100(threads, regs, smem, blocks, warps, limiter):
    occ = occupancy(TARGETS["sm_90"], threads, regs, smem)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.limiter) == (blocks, warps, limiter)
    assert occ.fraction == pytest.approx(warps / 64)


def test_occupancy_rtx5090_has_48_warps():
    occ = occupancy(TARGETS["sm_120"], 1024, None, None)
    assert (occ.blocks_per_sm, occ.max_warps_per_sm) == (1, 48)
    assert occ.fraction == pytest.approx(32 / 48)
    with pytest.raises(ValueError):
        occupancy(TARGETS["sm_90"], 0, 32, 0)


def test_targets_carry_sm_limits():
    for t in TARGETS.values():
        assert t.sm_count > 0 and t.l2_bytes > 0
        assert t.smem_per_sm >= t.dynamic_smem_per_block
