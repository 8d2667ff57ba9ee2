"""Issue 13 defect 1: register tiling (t008) wraps each run of statements in register loops
of its own; a value one run computes per slot (it depends on a tiled axis) and a later run
reads must be recomputed there, not read out of scope ("in0 is used before it is declared").
Every example of the issue and variants: a per-row scale before/after the K loop, a bias
on a transposed output, K = 1, dequantised weights, MLP-Mixer token mixing, attention with
a float mask then `where`."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from defect_checks import check_everywhere

import deplokit
from deplokit.ir.loop_ir import Load, Loop
from deplokit.ir.tile_ir import Stage, walk

r = torch.randn


def _mixer(x, w1, b1, w2, b2):
    y = F.layer_norm(x, (x.shape[-1],)).transpose(1, 2)
    return x + F.linear(F.gelu(F.linear(y, w1, b1)), w2, b2).transpose(1, 2)


def _masked_attention(q, k, v, m, keep):
    s = q @ k.transpose(-1, -2) * 0.2 + m
    s = torch.where(keep, s, torch.finfo(torch.float32).min)
    return torch.softmax(s, -1) @ v


CASES = {
    "matmul_then_row_scale": (lambda a, s, w: (a @ w) * s, lambda: (r(256, 64), r(256, 1), r(64, 64))),
    "row_scale_then_matmul": (lambda a, s, w: (a * s) @ w, lambda: (r(256, 64), r(256, 1), r(64, 64))),
    "scale_before_and_after": (lambda a, s, t, w: ((a * s + t) @ w) * s,
                               lambda: (r(256, 64), r(256, 1), r(256, 1), r(64, 128))),
    "epilogue_reads_scale_twice": (lambda a, s, w: (a @ w) * s + s, lambda: (r(256, 64), r(256, 1), r(64, 128))),
    "linear_bias_transposed": (lambda x, w, b: F.linear(x, w, b).t(), lambda: (r(128, 64), r(96, 64), r(96))),
    "k1_linear": (lambda x, w: F.linear(x, w), lambda: (r(64, 1), r(3, 1))),
    "k1_outer_product": (lambda x, w: x @ w, lambda: (r(256, 1), r(1, 256))),
    "k1_linear_bias_odd": (lambda x, w, b: F.linear(x, w, b), lambda: (r(200, 1), r(130, 1), r(130))),
    "dequantised_linear": (lambda wi, sc, x: (wi.float() * sc) @ x,
                           lambda: (torch.randint(-8, 8, (128, 64)), r(128, 1), r(64, 96))),
    "dequantised_transposed": (lambda x, wi, sc: x @ (wi.float() * sc).t(),
                               lambda: (r(96, 64), torch.randint(-8, 8, (128, 64)), r(128, 1))),
    "normalised_rows": (lambda a, w: (a @ w) / (a @ w).sum(-1, keepdim=True), lambda: (r(128, 64), r(64, 128))),
    "mlp_mixer_token_mix": (_mixer, lambda: (r(2, 64, 32), r(128, 64), r(128), r(64, 128), r(64))),
    "float_mask_then_where": (_masked_attention, lambda: (r(1, 2, 128, 32), r(1, 2, 128, 32), r(1, 2, 128, 32),
                                                          r(1, 1, 128, 128), torch.rand(1, 1, 128, 128) > 0.3)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_before_a_tiled_loop(name):
    fn, make = CASES[name]
    c = check_everywhere(fn, *make(), atol=None)
    if name in PER_PASS:    # the Tile IR right after 008, and after every later pass
        for p in c.check_passes():
            assert p.result.ok, str(p)


PER_PASS = ("row_scale_then_matmul", "k1_linear", "dequantised_linear")


@pytest.mark.parametrize("tm, tn, layout", [(2, 1, "strided"), (4, 2, "contiguous"), (8, 4, "strided")])
def test_row_scale_under_every_register_block(tm, tn, layout):
    a, s, w = r(256, 64), r(256, 1), r(64, 128)
    config = {"008_register_tile.tm": tm, "008_register_tile.tn": tn, "008_register_tile.layout": layout}
    check_everywhere(lambda a, s, w: (a * s) @ w * s, a, s, w, config=config)


def test_recomputed_value_leaves_no_dead_copy():
    """The value is recomputed where it is read; the copy no one reads is dropped, and no
    register loop is left empty."""
    c = check_everywhere(lambda a, s, w: (a * s) @ w, r(256, 64), r(256, 1), r(64, 64))
    tile = c.tile_ir.kernels[0].tile()
    # s is read from global memory or from its shared-memory stage, whichever the schedule chose
    names = {"s"} | {st.name for st, _ in walk(tile.body) if isinstance(st, Stage) and st.tensor == "s"}
    loads_of_s = [st for st, _ in walk(tile.body) if isinstance(st, Load) and st.tensor in names]
    assert len(loads_of_s) == 1
    assert all(st.body for st, _ in walk(tile.body) if isinstance(st, Loop) and st.kind == "register")


def test_rows_merged_by_a_reshape_keep_one_row_a_thread():
    """x.reshape(B * T, K) @ w.t(): 005 writes row b*T + t as x[b, t, k], so a register block
    along M (t -> r*T + t) would read x[b, t + T, k]. 008 says so and leaves M alone; N still
    gets its register block, and the result matches eager on the simulator."""
    x, w = torch.randn(2, 16, 96), torch.randn(40, 96)
    c = deplokit.compile(lambda x, w: x.reshape(32, 96) @ w.t(), x, w, target="sm_90")
    (step,) = [s for s in c.trace if s.name == "008_register_tile"]
    assert "M's thread and block indices run along different dimensions of x" in str(step)
    torch.testing.assert_close(c.run(x, w, backend="sim"), x.reshape(32, 96) @ w.t(), rtol=1e-5, atol=1e-4)
    plain = deplokit.compile(lambda x, w: x @ w.t(), x.reshape(32, 96).contiguous(), w, target="sm_90")
    (step,) = [s for s in plain.trace if s.name == "008_register_tile"]
    assert step.changed and "different dimensions" not in str(step)
