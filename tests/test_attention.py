"""Attention lowered without S x T intermediates in global memory (row fusion,
deplokit/passes/rows/rows.py): the structural property, every backend and every pass
against torch eager, the printed IRs, and where row fusion rightly does not apply."""
import dataclasses
from functools import lru_cache

import pytest
import torch
import torch.nn.functional as F
from programs import corpus

import deplokit
from deplokit.ir import kernel_ir as K
from deplokit.ir.loop_ir import Kernel, LocalBuffer
from deplokit.ir.structural import structural_hash
from deplokit.passes.rows.rows import ROW_BUDGET
from deplokit.passes.schedule import SCHEDULE
from deplokit.runtime.sim import SimulationError, simulate_program

ATTENTION = {n: p for n, p in corpus().items() if n.startswith(("sdpa", "attention"))}
SMALL = sorted(n for n in ATTENTION if n != "sdpa_tinyllama_seq128")   # fast enough for every pass


# The row-fused schedule itself, on shapes where the guard alone would keep three kernels
# (query rows that share K/V re-read them once per row): its cost check is switched off.
ROWS = {"fuse_rows.by_cost": False, "fuse_attention.enable": False}


@lru_cache(maxsize=None)
def _compiled(name, **config):
    fn, inputs = ATTENTION[name]
    return deplokit.compile(fn, *inputs, config={**ROWS, **config})


def _rows_and_keys(c):
    """(B*H*S rows, T keys) of the program's attention, from the query and key inputs."""
    q, k = c.example_inputs[0], c.example_inputs[1]
    rows = 1
    for e in q.shape[:-1]:
        rows *= e
    return rows, k.shape[-2]


def _walk(body):
    for s in body:
        yield s
        for child in ("body", "then", "orelse"):
            yield from _walk(getattr(s, child, ()))


@pytest.mark.parametrize("name", sorted(ATTENTION))
def test_no_kernel_writes_scores_or_probabilities_to_global_memory(name):
    c = _compiled(name)
    rows, keys = _rows_and_keys(c)
    # Loop IR: one kernel, and nothing written but the output; the S x T tensors are locals
    assert len(c.loop_ir.kernels) == 1, [k.name for k in c.loop_ir.kernels]
    assert [b.kind for b in c.loop_ir.written] == ["output"]
    (kernel,) = c.loop_ir.kernels
    assert kernel.locals and all(b.type.numel == rows * keys for b in kernel.locals)
    assert all(b.row_numel == keys for b in kernel.locals)
    # Kernel IR: every global buffer is an input or the output, none of S x T per row block
    outputs = {b.name for b in c.loop_ir.written}
    inputs = {b.name for b in c.loop_ir.buffers}
    for k in c.kernel_ir.kernels:
        assert {p.name for p in k.params} <= inputs | outputs
        # on chip: one row of T floats per local, per block
        local_arrays = [s for s in _walk(k.body) if isinstance(s, K.SharedArray)
                        and s.name in {f"{b.name}_smem" for b in kernel.locals}]
        assert sorted(a.size for a in local_arrays) == [keys] * len(kernel.locals)


@pytest.mark.parametrize("backend", ["tensor", "loop", "sim"])
@pytest.mark.parametrize("name", sorted(ATTENTION))
def test_attention_matches_eager(name, backend):
    c = _compiled(name)
    res = c.check(backend=backend, rtol=1e-4, atol=1e-5)
    assert res.ok, str(res)
    fresh = tuple(torch.randn_like(x) if x.dtype == torch.float32 else x for x in c.example_inputs)
    res = c.check(*fresh, backend=backend, rtol=1e-4, atol=1e-5)
    assert res.ok, f"fresh inputs: {res}"


@pytest.mark.parametrize("name", ["sdpa_causal_gqa", "sdpa_bool_mask_dead_row", "sdpa_one_key",
                                  "sdpa_float_mask_dv24"])
def test_every_pass_keeps_attention_correct(name):
    """The Tile IR after each scheduling pass, simulated: before 004 every thread owns a
    row (its locals' rows side by side in shared memory), after it a block does."""
    checks = _compiled(name).check_passes()
    assert len(checks) == len(SCHEDULE)
    assert all(p.result.ok for p in checks), [str(p) for p in checks if not p.result.ok]


def test_row_fusion_off_stores_the_scores():
    """The config switch gives the lowering without row fusion: three kernels, and the
    scores and probabilities (S x T per head) as global temporaries."""
    c = _compiled("sdpa_causal_gqa", **{"fuse_rows.enable": False})
    rows, keys = _rows_and_keys(c)
    assert len(c.loop_ir.kernels) == 3
    temps = [b for b in c.loop_ir.written if b.kind == "temp"]
    assert [b.type.numel for b in temps] == [rows * keys, rows * keys]
    assert c.check(backend="sim").ok
    rows = next(s for s in c.trace if s.name == "fuse_rows")
    assert not rows.changed and rows.skipped_reason == "row fusion disabled by the knob"


def test_fuse_trace_explains_the_row_fusion():
    c = _compiled("sdpa_causal_gqa")
    notes = next(s for s in c.trace if s.name == "fuse_rows").notes
    assert ("rows: kernel merged_scaled_dot_product_attention fuses merged_causal, merged_probs, "
            "merged_scaled_dot_product_attention; keeps one row of causal [9], probs [9] on chip (72 bytes), "
            "never in global memory") in notes


def test_printed_irs_name_the_locals_and_are_deterministic():
    fn, inputs = ATTENTION["sdpa_causal_gqa"]
    a, b = deplokit.compile(fn, *inputs, config=ROWS), deplokit.compile(fn, *inputs, config=ROWS)
    for stage in ("loop", "tile", "kernel", "cuda"):
        assert str(a.ir(stage)) == str(b.ir(stage)), stage
    loop = str(a.loop_ir).splitlines()
    assert loop[:3] == ["=== merged_scaled_dot_product_attention -> scaled_dot_product_attention ===",
                        "local causal[9]: one row of (1, 4, 9, 9) float32 at a time, on chip",
                        "local probs[9]: one row of (1, 4, 9, 9) float32 at a time, on chip"]
    assert "            causal[0, a0, a1, a2] = v3" in loop          # written a row at a time
    tile = str(a.tile_ir)
    assert "local causal[9]" in tile and "Combine(acc1, max, over=(" in tile
    kernel = str(a.kernel_ir)
    assert "shared float causal_smem[9]" in kernel and "shared causal_smem[a2] = v3" in kernel
    assert "__shared__ __align__(16) float causal_smem[9];" in str(a.cuda)


def test_a_barrier_separates_writing_a_row_from_reading_it():
    """Without the barriers the materialiser puts between phases, the simulator's race check
    sees threads read score elements other threads wrote."""
    c = _compiled("sdpa_noncausal_hd64_odd")
    env = dict(c.values)
    env.update(c._bind(c.example_inputs))
    (k,) = c.kernel_ir.kernels
    assert sum(isinstance(s, K.Barrier) for s in k.body) >= 2      # after the scores, after the probabilities
    racy = K.KernelProgram(c.kernel_ir.buffers, c.kernel_ir.written,
                           (K.KernelFunc(k.name, k.params, k.grid, k.block,
                                         tuple(s for s in k.body if not isinstance(s, K.Barrier))),),
                           c.kernel_ir.outputs)
    with pytest.raises(SimulationError, match="_smem"):
        simulate_program(racy, env)


def test_rows_beyond_the_budget_stay_in_global_memory():
    keys = ROW_BUDGET // 8 + 1          # two rows of `keys` floats exceed the budget
    q, k = torch.randn(1, 1, 2, 4), torch.randn(1, 1, keys, 4)
    # two long rows would be split over blocks (split_reduce); this is about row fusion
    c = deplokit.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, k,
                         config={"split_reduce.splits": 1})
    assert len(c.loop_ir.kernels) == 3 and not any(kn.locals for kn in c.loop_ir.kernels)
    rows = next(s for s in c.trace if s.name == "fuse_rows")
    assert not rows.changed and f"more than the {ROW_BUDGET} bytes kept on chip" in rows.skipped_reason
    assert c.check(backend="loop").ok


def test_softmax_of_an_input_before_a_matmul_is_not_row_fused():
    """Row fusion needs a contraction producing the row: softmax(x) @ w keeps its tiled matmul."""
    c = deplokit.compile(lambda x, w: torch.softmax(x, -1) @ w, torch.randn(64, 32), torch.randn(32, 48))
    assert len(c.loop_ir.kernels) == 2 and not any(k.locals for k in c.loop_ir.kernels)


def test_structural_hash_ignores_local_names():
    """Two attention kernels that differ only in their tensors' names hash alike."""
    (k,) = _compiled("sdpa_causal_gqa").loop_ir.kernels
    types = _compiled("sdpa_causal_gqa").loop_ir.types()
    renamed = str(k).replace("causal", "causal_7")
    assert renamed != str(k)
    locals_ = tuple(LocalBuffer(b.name.replace("causal", "causal_7"), b.type, b.row_dims) for b in k.locals)

    def rename_stmt(s):
        if hasattr(s, "tensor") and s.tensor == "causal":
            s = dataclasses.replace(s, tensor="causal_7")
        if hasattr(s, "body"):
            s = dataclasses.replace(s, body=tuple(rename_stmt(x) for x in s.body))
        return s
    other = Kernel(k.name, k.outputs, tuple(rename_stmt(s) for s in k.body), locals_)
    assert str(other) == renamed
    assert structural_hash(other, types) == structural_hash(k, types)


@pytest.mark.parametrize("heads,rows,keys,dim", [(2, 1, 64, 16), (4, 33, 200, 16), (1, 8, 64, 32), (4, 2, 200, 8)])
def test_unscaled_attention_scores_are_the_dot_products(heads, rows, keys, dim):
    """softmax(q @ k^T) @ v with no scale: the scores have no epilogue, the running max is
    taken of the dot product itself. Where a row's lanes scatter the scores (flash_tile's
    transposing reduce) the max read the dot product's accumulator, which the scatter had
    renamed to each lane's own score (Kernel IR: acc0 read before it is declared)."""
    g = torch.Generator().manual_seed(heads * rows + keys + dim)
    q, k, v = (torch.randn(1, heads, n, dim, generator=g) for n in (rows, keys, keys))
    c = deplokit.compile(lambda q, k, v: torch.softmax(q @ k.transpose(-1, -2), -1) @ v, q, k, v)
    assert any(f.name.startswith("flash_") for f in c.kernel_ir.kernels)
    assert c.check(backend="sim").passed
