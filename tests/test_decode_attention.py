"""Flash-decoding (passes/flash/attention_split.py): one query row's keys split over blocks,
then combined in split order; the key loop bounded at run time by the position `pos`.
SmolLM2-135M's attention sizes: 9 query heads, 3 kv heads, head_dim 64."""
import numpy as np
import pytest
import torch

import deplokit
from deplokit.runtime.nvcc import nvcc_available

H, KV, D = 9, 3, 64


def attention(length):
    class Attn(torch.nn.Module):
        """One token's attention over a cache of `length` keys, keys 0..pos visible (GQA)."""

        def forward(self, q, k, v, pos):
            keep = (torch.arange(length) <= pos).view(1, 1, 1, length)
            k = k[:, :, None].expand(1, KV, H // KV, length, D).reshape(1, H, length, D)
            v = v[:, :, None].expand(1, KV, H // KV, length, D).reshape(1, H, length, D)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    return Attn()


def inputs(length, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, H, 1, D, generator=g), torch.randn(1, KV, length, D, generator=g),
            torch.randn(1, KV, length, D, generator=g))


def compiled(length):
    q, k, v = inputs(length)
    return deplokit.compile(attention(length), q, k, v, torch.zeros(1, dtype=torch.int64), scalars=("pos",))


@pytest.fixture(scope="module")
def short():
    return compiled(256)


def kernels(c):
    return {k.name: k for k in c.kernel_ir.kernels}


def test_the_keys_split_over_blocks_and_a_combine(short):
    ks = kernels(short)
    split, combine = ks["flash_scaled_dot_product_attention_split"], ks["flash_scaled_dot_product_attention_combine"]
    assert len(ks) == 2
    # 16 key ranges of one 16-key tile each, for each of the 3 kv heads' blocks (3 query heads a block)
    assert split.grid == (48, 1, 1)
    plan = next(k.flash for k in short.loop_ir.kernels if k.flash is not None)
    assert plan.splits == 16 and plan.group == 3
    # no atomics: the combine reads the partials in split order
    assert "atomic" not in str(short.cuda)
    assert combine.grid[0] >= 1


def test_the_key_loop_stops_at_the_runtime_position(short):
    loop = str(short.loop_ir)
    assert "for a3 in 0..16 while a3 < pos[0] - a1 * 16 + 1:  # serial" in loop
    assert "while a3o < -a1 + (pos[0] // 16) + 1:  # serial" in str(short.tile_ir)
    cuda = str(short.cuda)
    assert "for (int a3o = 0; a3o < (a1 * -1 + idx1 / 16 + 1 < 1 ? a1 * -1 + idx1 / 16 + 1 : 1); ++a3o)" in cuda
    assert "const long long* __restrict__ pos" in cuda


@pytest.mark.parametrize("backend", ["loop", "sim"])
def test_one_compile_matches_eager_at_every_position(short, backend):
    """Positions 0, 1, a middle one and the last, one Compilation."""
    q, k, v = inputs(256)
    for p in (0, 1, 131, 255):
        pos = torch.tensor([p])
        want = attention(256)(q, k, v, pos).numpy()
        got = short.run(q, k, v, pos, backend=backend)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def test_the_simulator_reads_no_key_tile_past_the_position(short):
    """Keys and values past pos's tile are NaN: a kernel that read them (0 * NaN in P @ V)
    would return NaN; the bounded key loop never reaches them."""
    q, k, v = inputs(256)
    p = 40                                    # tile 2 holds keys 32..47
    want = attention(256)(q, k, v, torch.tensor([p])).numpy()
    k[:, :, 48:] = float("nan")
    v[:, :, 48:] = float("nan")
    got = np.asarray(short.run(q, k, v, torch.tensor([p]), backend="sim"))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_long_cache_fills_the_sms():
    c = compiled(2048)
    split = kernels(c)["flash_scaled_dot_product_attention_split"]
    assert split.grid[0] >= c.target.sm_count        # 192 blocks on 132 SMs
    plan = next(k.flash for k in c.loop_ir.kernels if k.flash is not None)
    assert plan.splits == 64 and split.grid == (3 * 64, 1, 1)


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
def test_split_and_combine_compile_with_nvcc(short, arch):
    result = short.nvcc(arch)
    assert set(result.stats) == set(short.cuda.kernels)


def test_identical_layers_compile_once():
    """The decode program of 2 and of 4 layers: the same unique kernels (one split attention
    kernel and one combine among them), more launches."""
    transformers = pytest.importorskip("transformers")
    from deplokit.generate import build_decoder

    def decode(layers):
        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                       num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                       max_position_embeddings=64)
        return build_decoder(transformers.LlamaForCausalLM(cfg).eval(), max_length=32).decode
    two, four = decode(2), decode(4)
    assert len(four.kernel_ir.kernels) == len(two.kernel_ir.kernels)
    assert sum(k.name.endswith("_split") for k in two.kernel_ir.kernels) == 1
    assert sum(k.name.endswith("_combine") for k in two.kernel_ir.kernels) == 1
    per_layer = (len(four.launches) - len(two.launches)) // 2
    assert per_layer > 0 and len(two.launches) > 2 * per_layer      # each layer's kernels, launched per layer
