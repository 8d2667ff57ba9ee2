"""Issue 26: every matmul's grid keeps the SMs evenly loaded (SM balance = mean blocks per SM
over the busiest SM's >= 0.90, or >= 8 blocks per SM) where a tile and split count do it at
a price within grid_plan.BALANCE_SLACK (a split count that divides no K chunk count
overhangs K with zeros: every block runs as long); 003 decides, 005 and 008 follow, the trace
says why."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import deplokit
from deplokit.analysis.occupancy import balanced, sm_balance
from deplokit.bench.suite import suite_entries
from deplokit.ir.kernel_wgmma import uses_wgmma
from deplokit.ir.tile_ir import WarpgroupMma, walk
from deplokit.passes.schedule.grid_plan import (
    FACTOR_SPLITS,
    decide,
    default_blocks,
    old_splits,
    split_counts,
    stream_k_words,
    wgmma_cheapest,
    wgmma_price,
)
from deplokit.runtime.nvcc import compile_cuda, nvcc_available
from deplokit.runtime.sim import simulate_program
from deplokit.target import get_target

H100 = get_target("sm_90")


def test_sm_balance_is_mean_over_busiest():
    assert round(sm_balance(148, 132), 2) == 0.56        # 16 SMs run two tiles, 116 one
    assert round(sm_balance(176, 132), 2) == 0.67
    assert sm_balance(264, 132) == 1.0
    assert not balanced(352, 132) and balanced(1036, 132) and balanced(1408, 132)   # 2.67 / SM; 7.85; 10.67


def _suite_matmuls():
    seen = {}
    for e in suite_entries("llm"):
        if e.op in ("matmul", "matmul_bias", "matmul_add", "silu_mul_matmul"):
            x, w = e.shapes[0], e.shapes[2 if e.op == "silu_mul_matmul" else 1]
            seen.setdefault((x[-2], w[1], w[0]), e.name)
    return seen


def test_every_suite_matmul_grid_is_balanced():
    low = []
    for (m, n, k), name in _suite_matmuls().items():
        plan, why = decide(m, n, k // 16, 16, H100, 1)
        blocks = plan.blocks if plan else default_blocks(m, n, 1, old_splits(m, n, k // 16, 1, H100), H100)
        if not balanced(blocks, H100.sm_count):
            low.append((name, why))
    assert low == []
    # N = 5632 = 2^9 x 11 over 132 = 12 x 11 SMs: 44 tiles of 32 x 128 need a split count
    # with a factor 3, and none divides 128 K chunks: 3 splits of 43 chunks overhang K by one
    # chunk (read as zeros), 132 blocks that all run as long
    plan, why = decide(32, 5632, 128, 16, H100, 1)
    assert (plan.splits, plan.blocks) == (3, 132) and "SM balance 1.00" in why
    assert "3 splits of 43 of 128 K chunks, 1 past the end read as zeros" in why


def test_an_overhanging_split_matches_eager_in_both_block_orders():
    # 104 K chunks in 3 splits of 35: the last split's 35th chunk lies past K (zeros)
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(8, 1664, generator=g), torch.randn(1664, 48, generator=g)
    c = deplokit.compile(lambda x, w: torch.relu(x @ w), x, w, config={"003_split_matmul_k.splits": 3})
    (tile,) = c.tile_ir.kernels
    assert (tile.split_k.splits, tile.split_k.overhang, tile.split_k.in_kernel) == (3, 1, True)
    env = {"x": x.numpy(), "w": w.numpy()}
    first = simulate_program(c.kernel_ir, env)[0]
    np.testing.assert_allclose(first, torch.relu(x @ w).numpy(), rtol=1e-4, atol=1e-4)
    assert np.array_equal(first, simulate_program(c.kernel_ir, env, block_order="reversed")[0])


def test_a_split_overhangs_only_where_the_reads_past_k_are_outside_the_tensors():
    # K = 40 of a longer axis (x[:, 10:50]): 10 chunks of 4 in 3 splits would overhang by 2
    # chunks reading x[:, 50:58] (real values, not zeros): the 10th chunk is the reducer's
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(33, 100, generator=g), torch.randn(100, 16, generator=g)
    config = {"002_chunk_matmul_k.k_chunk": 4, "003_split_matmul_k.splits": 3}
    c = deplokit.compile(lambda x, w: x[:, 10:50] @ w[10:50], x, w, target="sm_80", config=config)
    split = next(k for k in c.tile_ir.kernels if k.split_k is not None).split_k
    assert (split.splits, split.leftover, split.overhang, split.in_kernel) == (3, 1, 0, False)
    step = next(s for s in c.trace if s.name == "003_split_matmul_k")
    assert any("no overhang: the K loop's loads past its end are not provably outside" in d.note
               for d in step.decisions)
    assert c.check(x, w, backend="sim", rtol=1e-4).ok
    # the whole axis (K = 93 of x (33, 31, 3) reshaped): past K lies past the tensors, it overhangs
    x, w = torch.randn(33, 31, 3, generator=g), torch.randn(93, 16, generator=g)
    c = deplokit.compile(lambda x, w: x.reshape(33, 93) @ w, x, w, target="sm_80", config=config)
    split = next(k for k in c.tile_ir.kernels if k.split_k is not None).split_k
    assert (split.splits, split.leftover, split.overhang) == (3, 0, 1)
    assert c.check(x, w, backend="sim", rtol=1e-4).ok


def test_qwen_gate_s128_takes_seven_splits_of_whole_tiles():
    # 148 output tiles of 128 x 128 on 132 SMs (0.56) -> 7 splits of 32 chunks: 1036 blocks
    plan, why = decide(128, 18944, 3584 // 16, 16, H100, 1)
    assert (plan.splits, plan.blocks) == (7, 1036) and plan.threads[0] * plan.regs[0] == 128
    assert "SM balance 0.98" in why and "148 blocks has SM balance 0.56" in why


def test_a_compiled_matmul_launches_the_balanced_grid_and_says_why():
    # 128 x 9472 over K = 1024: the default tiles give 148 blocks (0.56)
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(128, 1024, generator=g), torch.randn(1024, 9472, generator=g)
    c = deplokit.compile(lambda x, w: x @ w, x, w)
    plan, why = decide(128, 9472, 64, 16, H100, 1)
    func = c.kernel_ir.kernels[0]
    blocks = func.grid[0] * func.grid[1] * func.grid[2]
    assert blocks == plan.blocks and balanced(blocks, H100.sm_count)
    assert func.threads == plan.threads[0] * plan.threads[1]
    step = next(s for s in c.trace if s.name == "003_split_matmul_k")
    assert any("SM balance" in r for r in step.remarks)
    # deterministic: the same grid and source on a second compile
    assert str(deplokit.compile(lambda x, w: x @ w, x, w).cuda) == str(c.cuda)


def test_a_seven_way_split_with_a_leftover_chunk_matches_eager_on_the_simulator():
    # split counts outside the powers of two (they balance 148 tiles: 7 x 148 = 1036 blocks):
    # 106 chunks in 7 splits overhang (7 x 16 = 112, 6 chunks of zeros past K); with 8
    # splits of 13, the 105th and 106th chunks are the reducer's, summed after the partials
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(8, 1696, generator=g), torch.randn(1696, 48, generator=g)
    c = deplokit.compile(lambda x, w: x @ w, x, w, config={"003_split_matmul_k.splits": 7})
    split = next(k for k in c.tile_ir.kernels if k.split_k is not None).split_k
    assert (split.splits, split.leftover, split.overhang) == (7, 0, 6)
    assert c.check(x, w, backend="sim", rtol=1e-4).ok
    c = deplokit.compile(lambda x, w: x @ w, x, w, config={"003_split_matmul_k.splits": 8})
    split = next(k for k in c.tile_ir.kernels if k.split_k is not None).split_k
    assert (split.splits, split.leftover, split.overhang, split.in_kernel) == (8, 2, 0, False)
    assert c.check(x, w, backend="sim", rtol=1e-4).ok
    assert torch.equal(c.run(x, w, backend="sim"), c.run(x, w, backend="sim"))


def test_the_static_suite_bench_prints_grid_balance_model_and_floor(capsys):
    import bench_suite_static  # benchmarks/ is on the path (conftest.py)
    assert bench_suite_static.main(["--filter", "^matmul.qwen.gate_proj.s128$", "--no-ptxas"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[-4:] == ["model", "µs", "floor", "µs"]
    assert "bal" in out[0] and "spill" in out[0]
    entry, kernels = out[1].split(), [line.split() for line in out[2:-1]]
    assert entry[:3] == ["matmul.qwen.gate_proj.s128", "1", "kernel"]     # split-K reduced in the kernel
    model, floor = float(entry[-2]), float(entry[-1])
    assert model > floor > 0
    assert kernels[0][:5] == ["merged_matmul", "1036", "256", "7.85", "0.98"]
    assert "0 of 1" in out[-1]


def test_a_batch_of_attention_matmuls_takes_a_balanced_grid():
    # qwen's naive attention at 128 tokens: 28 heads of 128 x 128 over K = 128 (Q @ K^T, P @ V);
    # the default 64 x 64 tiles x 2 splits gave 224 blocks (1.70 per SM, 0.85); 32 tiles a
    # head, one head a block, give 896 (6.79 per SM, 0.97)
    plan, why = decide(128, 128, 8, 16, H100, 28)
    assert plan.blocks == 896 and balanced(plan.blocks, H100.sm_count)
    assert "default grid of 224 blocks has SM balance 0.85" in why and "SM balance 0.97" in why
    # 32 heads of 32 x 32 over K = 64: two heads a block at 8 x 16 threads gave 16 blocks
    plan, why = decide(32, 32, 4, 16, H100, 32)
    assert balanced(plan.blocks, H100.sm_count) and "default grid of 16 blocks" in why


def test_a_compiled_batched_matmul_launches_the_balanced_grid_and_matches_eager():
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(1, 28, 32, 128, generator=g), torch.randn(1, 28, 32, 128, generator=g)
    fn = lambda q, k: q @ k.transpose(-1, -2)  # noqa: E731
    c = deplokit.compile(fn, q, k)
    plan, why = decide(32, 32, 8, 16, H100, 28)
    func = c.kernel_ir.kernels[0]
    blocks = func.grid[0] * func.grid[1] * func.grid[2]
    assert blocks == plan.blocks and balanced(blocks, H100.sm_count)
    assert func.threads == plan.threads[0] * plan.threads[1]       # no batch entries share a block
    step = next(s for s in c.trace if s.name == "003_split_matmul_k")
    assert any("a batch of 28 32x32 matmuls" in (d.skipped or d.note) for d in step.decisions)
    assert c.check(q, k, backend="sim", rtol=1e-4, atol=1e-4).ok
    assert str(deplokit.compile(fn, q, k).cuda) == str(c.cuda)


def test_every_suite_attention_matmul_kernel_is_balanced(capsys):
    import bench_suite_static  # benchmarks/ is on the path (conftest.py)
    assert bench_suite_static.main(["--filter", r"^(naive_attn|sdpa)\.qwen\.s(32|128)\.bf16$|"
                                                r"^naive_attn\.(qwen\.s128|tinyllama\.s32\.bf16)$",
                                    "--no-ptxas"]) == 0
    out = capsys.readouterr().out.splitlines()
    # naive_attn.qwen.s128 (FP32) runs Q @ K^T and P @ V unfused: at least those two count
    import re
    low, total = map(int, re.search(r"blocks per SM: (\d+) of (\d+)", out[-1]).groups())
    assert low == 0 and total >= 2


def _naive_attention(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1) @ v


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_a_half_attention_bmm_keeps_its_tensor_cores_and_matches_eager(target):
    # bf16 Q @ K^T of 28 heads x 64 x 64 over head_dim 64: main ran 28 blocks of mma (0.21). On
    # sm_80 the balanced grid keeps whole warp tiles of m16n8, so mma.sync stays; on sm_90 a half
    # batch takes wgmma's grid (grid_plan.wgmma_plan): one head a block of one warpgroup
    # of 64 x 64 (no tile of 64 rows balances 28 heads on 132 SMs; the tensor cores come first)
    g = torch.Generator().manual_seed(3)
    q, k = (torch.randn(1, 28, 64, 64, generator=g).to(torch.bfloat16) for _ in range(2))
    c = deplokit.compile(lambda q, k: q @ k.transpose(-1, -2), q, k, target=target)
    func = c.kernel_ir.kernels[0]
    blocks = func.grid[0] * func.grid[1] * func.grid[2]
    if target == "sm_80":
        assert balanced(blocks, get_target(target).sm_count)
        assert "mma.sync" in str(c.cuda)
    else:
        assert blocks == 28 and func.block == (128, 1, 1) and "wgmma.mma_async" in str(c.cuda)
    assert c.check(q, k, backend="sim", rtol=2e-2, atol=2e-2).ok


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_balanced_attention_bmms_compile_without_spills(dtype):
    # qwen's naive attention at 128 tokens (28 heads, head_dim 128): every matmul kernel balanced
    x = torch.zeros(1, 28, 128, 128, dtype=dtype)
    c = deplokit.compile(_naive_attention, x, x, x, target="sm_90")
    stats = compile_cuda(str(c.cuda), c.cuda.build_arch("sm_90"), kernel_names=c.cuda.kernels).stats
    matmuls = [f for f in c.kernel_ir.kernels if "matmul" in f.name]
    assert len(matmuls) == 2
    for f in matmuls:
        # bf16 Q @ K^T runs wgmma, one head a block (wgmma_plan: no 64-row tile balances
        # 28 heads); P @ V multiplies the softmax's FP32 output on FMA, balanced
        if uses_wgmma(f):
            assert dtype == torch.bfloat16 and f.grid[0] * f.grid[1] * f.grid[2] % 28 == 0, f.name
        else:
            assert balanced(f.grid[0] * f.grid[1] * f.grid[2], H100.sm_count), f.name
        assert stats[f.name].spills == 0, f.name


def test_a_staged_swiglu_prologue_overhangs_and_reduces_in_the_kernel():
    # (silu(gate) * up) @ w over K = 40 in 10 chunks of 4, 3 splits: past K, gate, up and w are
    # all outside their tensors (zeros), and silu(0) * 0 * 0 is 0, so the last split overhangs by
    # 2 chunks and the GEMM reduces its partials itself: one kernel (issue 26, silu_mul_matmul),
    # no reducer taking the 10th chunk
    g = torch.Generator().manual_seed(5)
    gate, up, w = torch.randn(24, 40, generator=g), torch.randn(24, 40, generator=g), torch.randn(40, 36, generator=g)
    config = {"002_chunk_matmul_k.k_chunk": 4, "003_split_matmul_k.splits": 3}
    fn = lambda a, b, w: (torch.nn.functional.silu(a) * b) @ w  # noqa: E731
    c = deplokit.compile(fn, gate, up, w, config=config)
    (tile,) = c.tile_ir.kernels
    split = tile.split_k
    assert (split.splits, split.leftover, split.overhang, split.in_kernel) == (3, 0, 2, True)
    assert len(c.kernel_ir.kernels) == 1
    env = {"a": gate.numpy(), "b": up.numpy(), "w": w.numpy()}
    out = simulate_program(c.kernel_ir, env)[0]
    np.testing.assert_allclose(out, fn(gate, up, w).numpy(), rtol=1e-4, atol=1e-4)
    assert np.array_equal(out, simulate_program(c.kernel_ir, env, block_order="reversed")[0])


@pytest.mark.parametrize("tokens,experts,hidden", [(32, 8, 4096), (48, 16, 2048), (17, 8, 4096)])
def test_a_half_router_matmul_plans_the_fma_tile_008_builds_and_balances(tokens, experts, hidden):
    # Mixtral's router: a few experts, so one block's threads cover N and 008 keeps the FMA
    # tile (mma_tile needs M and N blocks). 002 used to chunk K for wgmma (64) and 003 to plan
    # for tensor cores: 32 blocks at 32 tokens (0.24). Both now plan the tile 008 builds.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(tokens, hidden, generator=g).bfloat16()
    w = torch.randn(experts, hidden, generator=g).bfloat16()
    c = deplokit.compile(lambda x, w: (x @ w.t()).float(), x, w, target="sm_90")
    kern = c.tile_ir.kernels[0]
    assert kern.mma is None
    chunk = next(s for s in c.trace if s.name == "002_chunk_matmul_k").decision(kern.name)
    assert dict(chunk.knobs)["k_chunk"] == 16
    blocks = [f.grid[0] * f.grid[1] * f.grid[2] for f in c.kernel_ir.kernels if f.name == kern.name][0]
    assert balanced(blocks, H100.sm_count), blocks
    if tokens < 40:
        assert c.check(backend="sim").passed


A100 = get_target("sm_80")


def test_a_nine_way_split_balances_an_a100():
    # 24 tiles of 64 x 128 on 108 = 4 x 27 SMs: 8 splits were 192 blocks (0.89) and no power
    # of two does better; 9 splits of 22 of 192 K chunks (6 past the end read as zeros) are 216
    plan, why = decide(64, 3072, 192, 16, A100, 1)
    assert (plan.splits, plan.blocks) == (9, 216) and "SM balance 1.00" in why
    assert "9 splits of 22 of 192 K chunks, 6 past the end read as zeros" in why
    # never for mma.sync: the plan prices its K loop as FFMAs (split_counts)
    fed, _ = decide(64, 3072, 192, 16, A100, 1, True, True, False, 2)
    assert fed.splits not in FACTOR_SPLITS
    # FACTOR_SPLITS are offered only where no other count balances the grid
    assert set(split_counts(192, 4, factor=True)) - set(split_counts(192, 4)) == set(FACTOR_SPLITS)
    even, _ = decide(64, 3072, 192, 16, H100, 1)
    assert even.splits not in FACTOR_SPLITS and balanced(even.blocks, H100.sm_count)


def test_one_half_matmul_on_wgmma_takes_a_balanced_grid_of_warpgroup_tiles():
    # Qwen2.5-1.5B's k_proj at 128 tokens: 003 planned register-block tiles (8 of 64 x 64, 4
    # splits) and 008's widest warpgroup tile, 128 x 256, made 4 blocks of them
    g = torch.Generator().manual_seed(6)
    x = torch.randn(1, 128, 1536, generator=g).bfloat16()
    w = torch.randn(256, 1536, generator=g).bfloat16()
    c = deplokit.compile(lambda x, w: torch.nn.functional.linear(x, w), x, w, target="sm_90")
    (f,) = c.kernel_ir.kernels
    blocks = f.grid[0] * f.grid[1] * f.grid[2]
    assert uses_wgmma(f) and balanced(blocks, H100.sm_count)
    plan, why = decide(128, 256, 24, 64, H100, 1, True, False, True, 2)
    assert plan.blocks == blocks and "on wgmma: 003's grid of 4 warpgroup tiles has SM balance 0.03" in why
    assert c.check(backend="sim").passed


def test_a_balanced_wgmma_grid_replaces_a_dearer_balanced_one():
    # Llama-3-8B's q_proj at 64 tokens: the register-block plan's 8 splits of 64 x 128 became
    # 128 blocks of 64 x 256 warpgroup tiles (balanced), each writing a partial (8 MB in all);
    # 64 x 32 warpgroup tiles launch as many blocks without splitting K
    plan, why = decide(64, 4096, 64, 64, H100, 1, True, False, True, 2)
    assert (plan.splits, plan.blocks) == (1, 128) and "on wgmma: 003's grid of 128 warpgroup tiles prices" in why
    x, w = torch.randn(1, 64, 4096).bfloat16(), torch.randn(4096, 4096).bfloat16()
    c = deplokit.compile(lambda x, w: torch.nn.functional.linear(x, w), x, w, target="sm_90")
    (f,) = c.kernel_ir.kernels
    assert uses_wgmma(f) and f.grid[0] * f.grid[1] * f.grid[2] == 128 and c.tile_ir.kernels[0].split_k is None


def test_a_wgmma_grid_leaves_no_chunks_to_the_reducer():
    # 14 K chunks in 4 splits run 3 each and leave 2 to the reducer, which walks them on FMA
    # (256 x 128 over K 896: 26 µs against 8 by the cost model): no wgmma plan
    assert wgmma_price(256, 128, 14, 64, H100, 1, "8x16", 4) is None
    assert wgmma_price(256, 128, 14, 64, H100, 1, "8x16", 7) is not None


def test_the_balance_sweep_prints_kernels_below_the_bar_and_the_model(capsys):
    import balance_sweep  # benchmarks/ is on the path (conftest.py)
    assert balance_sweep.main(["--target", "sm_90", "--dtype", "bfloat16", "--tokens", "128",
                               "--projection", "256x1536", "--projection", "4096x4096"]) == 0
    out = capsys.readouterr().out.splitlines()
    # Qwen2.5-1.5B's k_proj at 128 tokens launched 4 blocks before the plan counted warpgroup tiles
    assert out[-1].startswith("sm_90 bfloat16: 0 of 2 matmul kernels below SM balance 0.90")
    us = float(out[-1].split("cost model ")[1].split()[0])
    assert us > 0
    with pytest.raises(SystemExit):
        balance_sweep.main(["--projection", "256by1536"])


def test_the_balance_sweep_draws_random_shapes_from_its_seed(capsys):
    import balance_sweep
    shapes = balance_sweep.random_shapes(40, 3)
    assert shapes == balance_sweep.random_shapes(40, 3) != balance_sweep.random_shapes(40, 4)
    assert all(1 <= m <= 512 and n % 64 == 0 and 256 <= k <= 8192 and k % 64 == 0 for m, n, k in shapes)
    assert balance_sweep.main(["--target", "sm_90", "--dtype", "float32", "--random", "2", "--seed", "3"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("sm_90 float32: ")
    with pytest.raises(SystemExit):
        balance_sweep.main(["--random", "-1"])


@pytest.mark.parametrize("m,n,k", [(128, 128, 896), (72, 1792, 3520), (64, 128, 896)])
def test_where_no_grid_balances_the_cheapest_warpgroup_grid_wins(m, n, k):
    # Qwen2.5-0.5B's k_proj at 128 tokens, 128 x 128 over K 896 (14 chunks of 64): no grid
    # fills 132 SMs evenly. 003's rule split one 128 x 128 warpgroup tile in 2 (2 blocks);
    # the cheapest grid by wgmma_price over every thread shape, split count and N tile
    # (wgmma_cheapest) is narrower N tiles, no split; 008 takes the plan's N tile. 72 x 1792
    # over K 3520 made 42 blocks of 64 x 256 in 3 splits; 64 x 128 over K 896 ran 4 blocks of
    # mma.sync (003's 16 x 16 threads have no warpgroup tile)
    plan, why = decide(m, n, k // 64, 64, H100, 1, True, False, True, 2)
    cheapest = wgmma_cheapest(m, n, k // 64, 64, H100)
    assert plan == cheapest and plan.n_tile and not balanced(plan.blocks, H100.sm_count)
    # why no balanced grid: none exists, or the cheapest balanced one prices over the slack
    assert "no grid of warpgroup tiles balances it" in why or ", over 1.1 (" in why
    if (m, n) == (128, 128):
        old = wgmma_price(m, n, k // 64, 64, H100, 1, "16x16", 2)
        assert old.blocks == 2 and plan.us * 1.10 < old.us and plan.blocks > old.blocks
    g = torch.Generator().manual_seed(m + n)
    x = torch.randn(1, m, k, generator=g, dtype=torch.bfloat16)
    w = (torch.randn(n, k, generator=g) / k ** 0.5).to(torch.bfloat16)
    c = deplokit.compile(lambda x, w: torch.nn.functional.linear(x, w), x, w, target="sm_90")
    (kern,) = [f for f in c.kernel_ir.kernels if not f.reduces_for]
    assert kern.grid[0] * kern.grid[1] * kern.grid[2] == plan.blocks and uses_wgmma(kern)
    (mma,) = {s.n for s, _ in walk(c.tile_ir.kernels[0].tile().body) if isinstance(s, WarpgroupMma)}
    assert mma == plan.n_tile
    step = next(s for s in c.trace if s.name == "008_register_tile")
    assert any(f"wgmma N tile {plan.n_tile}, the grid plan's" in r for r in step.remarks)
    assert c.check(backend="sim").passed


def test_the_tuner_tries_the_factor_split_counts_where_the_plan_took_one():
    from deplokit.passes.schedule.t003_split_matmul_k import KNOBS

    (splits,) = [k for k in KNOBS if k.name == "splits"]

    def searched(m, k, n, target):
        x, w = torch.randn(1, m, k), torch.randn(n, k)
        c = deplokit.compile(lambda x, w: torch.nn.functional.linear(x, w), x, w, target=target)
        (step,) = [s for s in c.trace if s.name == "003_split_matmul_k"]
        return splits.search_domain(step.before.kernels[0], c.target)

    on_a100 = searched(64, 3072, 3072, "sm_80")          # 9 splits: the plan's (see above)
    assert 9 in on_a100 and not {10, 11} & set(on_a100)
    on_h100 = searched(64, 3072, 3072, "sm_90")          # balanced without them
    assert not set(FACTOR_SPLITS) & set(on_h100) and set(on_h100) | set(FACTOR_SPLITS) == set(splits.domain)


def test_a_grid_without_a_warpgroup_tile_takes_the_wgmma_plan():
    # Qwen2.5-1.5B's k_proj at 64 tokens: 003's default (16 x 16 threads, 4 splits) has no
    # 64-row warpgroup tile (two warpgroups make 128 rows, past M), so 008 ran it on mma.sync
    # in 16 blocks; one warpgroup of 64 x 16 in 8 splits is 128 blocks on wgmma
    g = torch.Generator().manual_seed(8)
    x = torch.randn(1, 64, 1536, generator=g).bfloat16()
    w = (torch.randn(256, 1536, generator=g) / 1536 ** 0.5).bfloat16()
    c = deplokit.compile(lambda x, w: torch.nn.functional.linear(x, w), x, w, target="sm_90")
    (f,) = c.kernel_ir.kernels
    assert uses_wgmma(f) and f.grid[0] * f.grid[1] * f.grid[2] == 128
    _, why = decide(64, 256, 24, 64, H100, 1, True, False, True, 2)
    assert "has no warpgroup tile of its 16x16 threads" in why
    assert c.check(backend="sim").passed


@pytest.mark.parametrize("target,dtype,m,n,k,said", [
    # the default grid kept: a balanced one prices over the slack (sm_80, mma.sync)
    ("sm_80", torch.bfloat16, 512, 1536, 1536, "kept: unbalanced: the cheapest balanced grid"),
    # 008's warpgroup tiles of the plan, 36 blocks, price 1.26x the cheapest grid of narrower N
    # tiles (72 blocks), which still leaves SMs idle: the balanced one prices 2.06x that
    ("sm_90", torch.bfloat16, 76, 4608, 1984, "36 warpgroup tiles, SM balance 0.27, prices 1.26x this one; the "
                                              "cheapest balanced grid (360 blocks) prices 2.06x"),
    # a 64 x 128 output over K 896: no grid of warpgroup tiles fills 132 SMs evenly
    ("sm_90", torch.bfloat16, 64, 128, 896, "no grid of warpgroup tiles balances it"),
])
def test_every_grid_left_unbalanced_says_why_in_the_trace(target, dtype, m, n, k, said):
    x, w = torch.randn(1, m, k, dtype=dtype), torch.randn(n, k, dtype=dtype)
    c = deplokit.compile(lambda x, w: torch.nn.functional.linear(x, w), x, w, target=target)
    (kern,) = [f for f in c.kernel_ir.kernels if not f.reduces_for]
    blocks = kern.grid[0] * kern.grid[1] * kern.grid[2]
    assert not balanced(blocks, c.target.sm_count)
    remarks = [r for st in c.trace if st.name == "003_split_matmul_k" for r in st.remarks]
    assert any(said in r for r in remarks), remarks
    # ... and what stream-K would deal each SM and why 003 did not (it prices dearer: HBM, not
    # the busiest SM, bounds these half grids), or that it would not help
    assert any("nor would stream-K: " in r or "no stream-K: it prices" in r for r in remarks), remarks


def test_a_grid_tiles_and_splits_leave_unbalanced_is_dealt_to_stream_k():
    # fp32, 114 tiles of 32 x 128 over 56 K chunks: 228 blocks (SM balance 0.86), the balanced
    # grid of tiles and splits prices 1.25x; stream-K deals them to 264 workers (1.00)
    x, w = torch.randn(1, 96, 896), torch.randn(4864, 896)
    c = deplokit.compile(lambda x, w: torch.nn.functional.linear(x, w), x, w, target="sm_90")
    (kern,) = c.kernel_ir.kernels
    assert kern.grid == (264, 1, 1) and sm_balance(264, 132) == 1.0
    remarks = " ".join(r for st in c.trace if st.name == "003_split_matmul_k" for r in st.remarks)
    assert "unbalanced: the cheapest balanced grid" in remarks and "stream-K: 264 workers deal 114 tiles" in remarks


def test_the_trace_says_what_stream_k_would_deal_each_sm():
    # 72 tiles over 31 K chunks: 16.9 chunks an SM, a ring's worth: stream-K could balance it
    assert stream_k_words(72, 31, 132) == "(stream-K could deal them evenly: 72 tiles x 31 K chunks are 16.9 an SM)"
    # 16 tiles over 14 chunks are 1.7 an SM: latency-bound on any schedule
    assert stream_k_words(16, 14, 132) == "(nor would stream-K: 16 tiles x 14 K chunks are 1.7 an SM, under 4)"
    _, why = decide(128, 128, 14, 64, H100, 1, True, False, True, 2)
    assert why.endswith("(nor would stream-K: 16 tiles x 14 K chunks are 1.7 an SM, under 4))")
