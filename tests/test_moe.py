"""Mixture of experts: routing (topk, sort, histc, index_put, transformers' grouped matmul)
in the Tensor-IR primitives, checked op by op against torch on every backend, and on
transformers' tiny random-config Mixtral and Qwen3-MoE (a sparse block, whole models) on the
simulator; their CUDA passes nvcc where it is installed. docs/moe.md."""
from __future__ import annotations

import pytest
import torch

import deplokit
from deplokit.errors import DeplokitError, UnsupportedOpError
from deplokit.runtime.nvcc import nvcc_available

BACKENDS = ("tensor", "loop", "sim")


def _same(fn, *xs, atol=0.0, backends=BACKENDS):
    c = deplokit.compile(fn, *xs)
    want = fn(*xs)
    want = want if isinstance(want, tuple) else (want,)
    for backend in backends:
        got = c.run(*xs, backend=backend)
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=0, atol=atol, check_dtype=False)
    return c


# -- the routing ops, one at a time, exact on every backend --------------------------------

def test_topk_values_and_indices_match_torch_on_every_backend():
    torch.manual_seed(0)
    x = torch.randn(5, 7)
    _same(lambda x: torch.topk(x, 3, dim=-1), x)
    _same(lambda x: torch.topk(x, 2, dim=0, largest=False), x)


def test_topk_breaks_ties_lowest_index_first_and_counts_nan_largest():
    x = torch.tensor([[0.5, 2.0, 2.0, float("nan"), 1.0, 2.0]])
    c = deplokit.compile(lambda x: torch.topk(x, 4, dim=-1), x)
    values, indices = c.run(x, backend="loop")
    assert indices.tolist() == [[3, 1, 2, 5]]
    assert torch.isnan(values[0, 0]) and values[0, 1:].tolist() == [2.0, 2.0, 2.0]


def test_sort_is_stable_on_integer_ids():
    torch.manual_seed(1)
    ids = torch.randint(0, 4, (24,))
    _same(lambda i: torch.sort(i, stable=True), ids)
    _same(lambda x: torch.sort(x, dim=0, descending=True)[0], torch.randn(6, 3))


def test_histc_counts_expert_ids():
    ids = torch.tensor([0, 3, 3, 1, 2, 3, 0, 7, -1])
    c = _same(lambda i: torch.histc(i.float(), 4, 0, 3), ids)
    assert c.run(ids, backend="sim").tolist() == [2.0, 1.0, 1.0, 3.0]


def test_histc_bins_match_torch_on_fractional_values():
    torch.manual_seed(2)
    x = torch.rand(200) * 3 - 0.5
    _same(lambda x: torch.histc(x, 7, -0.25, 2.0), x, backends=("tensor", "loop"))


def test_index_put_inverts_a_permutation_and_the_last_write_wins():
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(3))
    _same(lambda p: torch.empty_like(p).index_put_((p,), torch.arange(12)), perm)
    base, idx = torch.zeros(4, 3), torch.tensor([2, 0, 2])
    vals = torch.arange(9, dtype=torch.float32).reshape(3, 3)
    c = _same(lambda b, i, v: b.index_put((i,), v), base, idx, vals, backends=("loop",))
    assert c.run(base, idx, vals, backend="loop")[2].tolist() == [6.0, 7.0, 8.0]


def _grouped(x, w, ids):
    import transformers.integrations.moe  # noqa: F401  (registers torch.ops.transformers)
    offs = torch.cumsum(torch.histc(ids.float(), w.shape[0], 0, w.shape[0] - 1), 0, dtype=torch.int32)
    return torch.ops.transformers.grouped_mm_fallback(x, w, offs)


def test_grouped_matmul_serves_each_row_its_experts_weights():
    pytest.importorskip("transformers")
    torch.manual_seed(4)
    ids = torch.sort(torch.randint(0, 3, (10,))).values     # expert 3 gets no rows
    _same(_grouped, torch.randn(10, 8), torch.randn(4, 8, 6), ids, atol=1e-5)


# -- the expert-aligned grouped matmul: each block serves one expert's rows -----------------

def _counted(x, w, ids):
    """The runs as every router makes them: a running count (cumsum of histc)."""
    from deplokit.frontend.moe_ops import grouped_mm
    offs = torch.cumsum(torch.histc(ids.float(), w.shape[0], 0, w.shape[0] - 1), 0, dtype=torch.int32)
    return grouped_mm(x, w, offs)


def _given(x, w, offs):
    from deplokit.frontend.moe_ops import grouped_mm
    return grouped_mm(x, w, offs)


def _grouped_kernels(c):
    """The Tile-IR kernels with a tile axis of role G."""
    return [k for k in c.tile_ir.kernels if any(a.role == "G" for a in k.tile().axes)]


def _sim_stats(c, *xs):
    """The outputs and SimStats of one simulated run (runtime.sim.simulate_program's)."""
    import deplokit.runtime.sim as sim
    stats, real = [], sim.simulate_program

    def spy(*a, **k):
        return real(*a, **k, stats=stats)
    sim.simulate_program = spy
    try:
        out = c.run(*xs, backend="sim")
    finally:
        sim.simulate_program = real
    return out, stats


ROUTINGS = {                      # (rows, experts): expert ids of the rows, sorted
    "random": lambda s, e, g: torch.randint(0, e - 1, (s,), generator=g),      # the last expert: no rows
    "one": lambda s, e, g: torch.full((s,), 2),                                  # every row to expert 2
    "ragged": lambda s, e, g: torch.tensor([0] * 17 + [1] + [3] * (s - 18)),    # runs of 17, 1, 0, s - 18
}


@pytest.mark.parametrize("routing", sorted(ROUTINGS))
def test_expert_tiles_match_eager_on_every_backend(routing):
    rows, depth, cols, experts = 41, 12, 20, 4          # 41 rows: no multiple of the 16-row tile
    g = torch.Generator().manual_seed(5)
    ids = torch.sort(ROUTINGS[routing](rows, experts, g)).values
    x, w = torch.randn(rows, depth, generator=g), torch.randn(experts, depth, cols, generator=g)
    c = _same(_counted, x, w, ids, atol=1e-5)
    assert len(_grouped_kernels(c)) == 1
    for other in ROUTINGS.values():                      # one compiled program serves any routing
        ids2 = torch.sort(other(rows, experts, g)).values
        torch.testing.assert_close(c.run(x, w, ids2, backend="sim"), _counted(x, w, ids2), rtol=0, atol=1e-5)


def test_each_block_serves_one_expert_and_reads_its_weights_once_per_tile():
    from deplokit.ir.index import free_vars
    from deplokit.ir.tile_ir import BLOCK, Stage, walk
    rows, depth, cols, experts = 41, 32, 24, 4
    g = torch.Generator().manual_seed(6)
    ids = torch.sort(torch.randint(0, experts, (rows,), generator=g)).values
    x, w = torch.randn(rows, depth, generator=g), torch.randn(experts, depth, cols, generator=g)
    c = deplokit.compile(_counted, x, w, ids)
    assert "# free (G)" in str(c.loop_ir)
    assert str(c.cuda) == str(deplokit.compile(_counted, x, w, ids).cuda)     # byte-identical
    (kernel,) = _grouped_kernels(c)
    tile = kernel.tile()
    (slot,) = [a for a in tile.axes if a.role == "G"]
    assert slot.kind == BLOCK                            # one tile of T rows per block, never split
    assert slot.extent == (rows + experts * (16 - 1)) // 16     # tiles <= rows / T + experts
    stages = {s.tensor: s for s, _ in walk(tile.body) if isinstance(s, Stage)}
    # the weights' box starts at the block's expert: a gather read by the G axis alone
    expert_at = stages["w"].origin[0]
    assert "gmm_slot_expert" in str(expert_at) and free_vars(expert_at) == {slot.var}
    assert "gmm_slot_base" in str(stages["x"].origin[0])
    out, stats = _sim_stats(c, x, w, ids)
    torch.testing.assert_close(out, _counted(x, w, ids), rtol=0, atol=1e-5)
    weight_bytes = sum(s.loaded_by_buffer.get("w", 0) for s in stats)
    # each block reads its expert's K x (its N tile) slice once: the slots' share of w
    assert weight_bytes == slot.extent * depth * cols * 4
    # the row path (offs given: runs that may overlap) reads an expert's column per output
    offs = torch.cumsum(torch.histc(ids.float(), experts, 0, experts - 1), 0).to(torch.int32)
    rows_c = deplokit.compile(_given, x, w, offs)
    assert not _grouped_kernels(rows_c)
    out, row_stats = _sim_stats(rows_c, x, w, offs)
    torch.testing.assert_close(out, _counted(x, w, ids), rtol=0, atol=1e-5)
    assert sum(s.loaded_by_buffer.get("w", 0) for s in row_stats) == rows * depth * cols * 4


@pytest.mark.parametrize("config", [{}, {"011_tma_copy.enable": True}], ids=["default", "tma"])
def test_expert_tiles_hold_after_every_scheduling_pass(config):
    """Each of the 16 passes keeps the meaning, with the weights' box at a gathered origin
    copied by cp.async or (forced) by TMA."""
    g = torch.Generator().manual_seed(8)
    ids = torch.sort(torch.randint(0, 4, (41,), generator=g)).values
    c = deplokit.compile(_counted, torch.randn(41, 32, generator=g), torch.randn(4, 32, 24, generator=g), ids,
                         config=config)
    checks = c.check_passes()
    assert len(checks) == 16 and all(p.result.ok for p in checks), [str(p) for p in checks]
    if config:
        (grouped,) = _grouped_kernels(c)
        (kernel,) = [k for k in c.kernel_ir.kernels if k.name == grouped.name]
        assert "tma" in str(kernel).lower()


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_expert_tiles_cuda_compiles_with_nvcc(arch):
    g = torch.Generator().manual_seed(7)
    ids = torch.sort(torch.randint(0, 4, (41,), generator=g)).values
    c = deplokit.compile(_counted, torch.randn(41, 32, generator=g), torch.randn(4, 32, 24, generator=g), ids,
                         target=arch)
    assert _grouped_kernels(c)
    assert c.nvcc(arch).arch == arch


def test_refusals_are_clear():
    with pytest.raises(UnsupportedOpError, match="sorted=False"):
        deplokit.compile(lambda x: torch.topk(x, 2, sorted=False)[0], torch.randn(3, 5))
    with pytest.raises(UnsupportedOpError, match="min < max"):
        deplokit.compile(lambda x: torch.histc(x, 4), torch.randn(8))
    with pytest.raises(UnsupportedOpError, match="accumulate"):
        deplokit.compile(lambda b, i: b.index_put((i,), torch.ones(3), accumulate=True),
                         torch.zeros(4), torch.tensor([0, 1, 1]))
    assert issubclass(UnsupportedOpError, DeplokitError)


def test_routing_prints_in_every_ir():
    c = deplokit.compile(lambda x: torch.topk(torch.softmax(x, -1), 2)[1], torch.randn(4, 6))
    tensor_ir = str(c.tensor_ir)
    assert "topk_rank" in tensor_ir and "sum" in tensor_ir
    assert "topk_rank" in str(c.loop_ir) and "__global__" in str(c.cuda)


# -- transformers' tiny random-config MoE models --------------------------------------------

transformers = pytest.importorskip("transformers")

from test_transformers_models import BASE, ODD, _inputs  # noqa: E402  (the shapes whole models use)


def _cls(name: str):
    if not hasattr(transformers, name):
        pytest.skip(f"transformers {transformers.__version__} has no {name}")
    return getattr(transformers, name)


def _mixtral(d, layers=None):
    return _cls("MixtralForCausalLM")(_cls("MixtralConfig")(
        hidden_size=d.hidden, num_attention_heads=d.heads, num_key_value_heads=d.kv_heads,
        intermediate_size=d.hidden + 8, num_hidden_layers=layers or d.layers, vocab_size=d.vocab,
        num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
        pad_token_id=0, bos_token_id=1, eos_token_id=2))


def _qwen3_moe(d, layers=None):
    return _cls("Qwen3MoeForCausalLM")(_cls("Qwen3MoeConfig")(
        hidden_size=d.hidden, num_attention_heads=d.heads, num_key_value_heads=d.kv_heads,
        head_dim=d.head_dim, intermediate_size=2 * d.hidden, moe_intermediate_size=d.hidden - 8,
        num_hidden_layers=layers or d.layers, vocab_size=d.vocab, num_experts=5, num_experts_per_tok=3,
        norm_topk_prob=True, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2))


MOE = {"mixtral": _mixtral, "qwen3-moe": _qwen3_moe}


def _logits(model, inputs):
    kwargs = {"attention_mask": inputs[1]} if len(inputs) > 1 else {}
    with torch.no_grad():
        return model(input_ids=inputs[0], use_cache=False, **kwargs).logits


@pytest.mark.parametrize("dims", [BASE, ODD], ids=["base", "odd"])
@pytest.mark.parametrize("name", sorted(MOE))
def test_sparse_block_matches_transformers(name, dims):
    torch.manual_seed(0)
    block = MOE[name](dims).eval().model.layers[0].mlp
    x = torch.randn(dims.batch + 2, dims.seq, dims.hidden)
    with torch.no_grad():
        want = block(x)
    _same(block, x, atol=1e-5)
    assert want.abs().max() > 1e-3       # the experts really contribute


@pytest.mark.parametrize("name", sorted(MOE))
def test_sparse_block_blocks_serve_one_expert_under_any_routing(name):
    """Both grouped matmuls (gate_up, down) are expert-tiled; tokens all alike send every
    row to the same k experts (the others get none), at the odd shape's token count."""
    torch.manual_seed(0)
    block = MOE[name](ODD).eval().model.layers[0].mlp
    x = torch.randn(ODD.batch + 2, ODD.seq, ODD.hidden)
    c = deplokit.compile(block, x)
    assert len(_grouped_kernels(c)) == 2
    alike = x[:1, :1].expand_as(x).contiguous()
    for inputs in (x, alike):
        with torch.no_grad():
            want = block(inputs)
        torch.testing.assert_close(c.run(inputs, backend="sim"), want, rtol=0, atol=1e-5)


@pytest.mark.slow     # 20-30 s each: whole models on the simulator
@pytest.mark.parametrize("dims", [BASE, ODD], ids=["base", "odd"])
@pytest.mark.parametrize("name", sorted(MOE))
def test_tiny_moe_model_matches_transformers_on_the_simulator(name, dims):
    torch.manual_seed(0)
    model = MOE[name](dims).eval()
    inputs = _inputs(dims, 0)
    c = deplokit.compile(model, *inputs, dedup=True)
    grouped = _grouped_kernels(c)                 # gate_up and down (one of each: dedup), a split-K reducer
    assert len(grouped) >= 2 and all(a.kind == "BLOCK" for k in grouped for a in k.tile().axes if a.role == "G")
    torch.testing.assert_close(c.run(*inputs, backend="sim"), _logits(model, inputs), rtol=1e-4, atol=1e-5)
    fresh = _inputs(dims, 1)     # other tokens route to other experts: nothing routed was folded
    torch.testing.assert_close(c.run(*fresh, backend="sim"), _logits(model, fresh), rtol=1e-4, atol=1e-5)
    if dims is ODD and nvcc_available():
        assert c.nvcc().arch == "sm_90"


# -- the LLM suite's MoE entry ------------------------------------------------------------------

def test_suite_moe_entry_is_mixtral_and_matches_eager_on_the_simulator():
    from deplokit.bench.suite import MoeShape, moe_entries, suite_entries
    names = {e.name: e for e in suite_entries("llm") if e.op == "moe"}
    assert set(names) == {f"moe.mixtral.s{s}{d}" for s in (32, 128, 512) for d in ("", ".bf16")}
    assert names["moe.mixtral.s128"].shapes == ((1, 128, 4096), (8, 4096), (8, 2 * 14336, 4096), (8, 4096, 14336))
    tiny = moe_entries(MoeShape("Test/Tiny-1", hidden=24, intermediate=20, experts=4, top_k=2), seqs=(5,))
    assert {e.dtype for e in tiny} == {"float32", "bfloat16"}
    for e in tiny:
        c = deplokit.compile(e.program(), *e.inputs())
        result = c.check(backend="sim")
        assert result.passed, (e.name, str(result))


# -- the fuzzer's routing template ----------------------------------------------------------------

def test_fuzzer_routing_template_matches_eager_at_random_shapes():
    import random

    from deplokit.fuzz import makers
    from deplokit.fuzz.programs import Case
    from deplokit.fuzz.runner import run_case
    from deplokit.fuzz.templates import covered_templates
    assert "moe_routing" in {t.name for t in covered_templates()}    # the registry covers its ops
    for seed, shape in ((1, (7, 12)), (5, (2, 3, 5))):
        rng, lines = random.Random(seed), [f"x0 = torch.randn({', '.join(map(str, shape))})"]

        def new_input(s):
            lines.append(f"x{len(lines)} = torch.randn({', '.join(map(str, s))}{',' if len(s) == 1 else ''})")
            return f"x{len(lines) - 1}"
        expr, out = makers.moe_routing(rng, shape, new_input)
        assert out == shape and "topk" in expr and "grouped_mm" in expr
        case = Case(seed, 0, "\n".join(lines + [expr.replace("{x}", "x0")]), ("moe_routing",))
        outcome = run_case(case, timeout=120)
        assert outcome.status == "ok", (outcome.stage, outcome.message, case.text)
