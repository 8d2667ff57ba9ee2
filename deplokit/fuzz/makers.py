"""Shape-aware makers of fuzz templates (templates.py): each (rng, shape, new_input) returns
a call as text with `{x}` for the value and the result's shape, or None where it does not
apply."""
from __future__ import annotations

from .limits import MAX_MATMUL, MAX_NUMEL, ODD, broadcast_shape, dim, numel


def transpose(rng, shape, inp):
    if len(shape) < 2:
        return None
    a, b = rng.sample(range(len(shape)), 2)
    out = list(shape)
    out[a], out[b] = out[b], out[a]
    return f"{{x}}.transpose({a}, {b})", tuple(out)


def permute(rng, shape, inp):
    if len(shape) < 2:
        return None
    order = list(range(len(shape)))
    rng.shuffle(order)
    return f"{{x}}.permute({', '.join(map(str, order))})", tuple(shape[i] for i in order)


def flatten(rng, shape, inp):
    if len(shape) < 2:
        return None
    return "{x}.reshape(" + ", ".join(map(str, shape[:-2] + (shape[-2] * shape[-1],))) + ")", \
        shape[:-2] + (shape[-2] * shape[-1],)


def unsqueeze(rng, shape, inp):
    if len(shape) >= 4:
        return None
    d = rng.randrange(len(shape) + 1)
    return f"{{x}}.unsqueeze({d})", shape[:d] + (1,) + shape[d:]


def squeeze(rng, shape, inp):
    ones = [d for d, e in enumerate(shape) if e == 1]
    if not ones:
        return None
    d = rng.choice(ones)
    return f"{{x}}.squeeze({d})", shape[:d] + shape[d + 1:]


def expand(rng, shape, inp):
    ones = [d for d, e in enumerate(shape) if e == 1]
    if not ones:
        return None
    d = rng.choice(ones)
    n = rng.choice((3, 5, 31))
    out = shape[:d] + (n,) + shape[d + 1:]
    if numel(out) > MAX_NUMEL:
        return None
    return f"{{x}}.expand({', '.join(map(str, out))})", out


def slice(rng, shape, inp):
    if not shape or shape[-1] < 2:
        return None
    d = dim(rng, shape)
    if shape[d] < 2:
        return None
    lo = rng.randrange(shape[d] // 2)
    hi = rng.randrange(lo + 1, shape[d] + 1)
    step = rng.choice((1, 1, 2, 3))
    lead = ":, " * d
    return f"{{x}}[{lead}{lo}:{hi}:{step}]", shape[:d] + (len(range(lo, hi, step)),) + shape[d + 1:]


def select(rng, shape, inp):
    if len(shape) < 2:
        return None
    i = rng.randrange(shape[0])
    return f"{{x}}[{i}]", shape[1:]


def cat(rng, shape, inp):
    if not shape or 2 * numel(shape) > MAX_NUMEL:
        return None
    d = dim(rng, shape)
    other = shape[:d] + (rng.choice((1, 3, 33)),) + shape[d + 1:]
    out = shape[:d] + (shape[d] + other[d],) + shape[d + 1:]
    return f"torch.cat([{{x}}, {inp(other)}], {d})", out


def matmul(expr, with_bias=False):
    def make(rng, shape, inp):
        if not shape:
            return None
        K, N = shape[-1], rng.choice(ODD[:6])
        rows = numel(shape[:-1])
        if rows * K * N > MAX_MATMUL or rows * N > MAX_NUMEL:
            return None
        w = inp((N, K) if "linear" in expr else (K, N))
        b = inp((N,)) if with_bias else ""
        return expr.replace("{w}", w).replace("{b}", b), shape[:-1] + (N,)
    return make


def reshaped_k(rng, shape, inp):
    """A matmul whose K merges the value's last two axes (after moving the third-last axis
    behind the second-last in the attention out-projection's form), on a few rows: the K of
    reshaped axes, long K and skinny M that give 003 high split counts with chunks left to
    the reducer (issue 29: its leftover run once read one long run along one axis); sometimes
    with the rows merged as well (row b*T + t read as x[b, t, k])."""
    if len(shape) < 2:
        return None
    x, lead = "{x}", list(shape[:-2])
    if len(shape) >= 4 and rng.random() < 0.7:
        x += f".transpose({len(shape) - 3}, {len(shape) - 2})"
        lead[-1], mid = shape[-2], shape[-3]
    else:
        mid = shape[-2]
    K, N = mid * shape[-1], rng.choice((1, 3, 16, 31, 33))
    rows = numel(lead)
    if K < 64 or rows * K * N > MAX_MATMUL or rows * N > MAX_NUMEL:
        return None
    if len(lead) >= 2 and rng.random() < 0.4:      # the rows merged too: x.reshape(B * T, K) (seed 406 case 922)
        lead = [rows]
    flat = f"{x}.reshape({', '.join(map(str, lead + [K]))})"
    if rng.random() < 0.5:
        return f"{flat} @ {inp((K, N))}", tuple(lead) + (N,)
    return f"F.linear({flat}, {inp((N, K))}, {inp((N,))})", tuple(lead) + (N,)


def sliced_k(rng, shape, inp):
    """A matmul whose K is a slice inside a longer axis (x[..., lo:hi] @ w[lo:hi]): the loads
    past K's end read the axis' next elements, not zeros, so a split count that overhangs K
    (3, 5, 7 splits of chunks they do not divide) must leave those chunks to the reducer
    (fuzz seed 403 case 661: split_reduce's K chunks, the same offset as a2s * 64 + k)."""
    if not shape or shape[-1] < 40:
        return None
    lo = rng.choice((1, 3, shape[-1] // 4))
    hi = shape[-1] - rng.choice((1, 5, shape[-1] // 4))
    K, N = hi - lo, rng.choice((1, 3, 16, 31, 33))
    rows = numel(shape[:-1])
    if K < 16 or rows * shape[-1] * N > MAX_MATMUL or rows * N > MAX_NUMEL:
        return None
    x = f"{{x}}[..., {lo}:{hi}]"
    if rng.random() < 0.5:
        return f"{x} @ {inp((shape[-1], N))}[{lo}:{hi}]", shape[:-1] + (N,)
    return f"F.linear({x}, {inp((N, shape[-1]))}[:, {lo}:{hi}], {inp((N,))})", shape[:-1] + (N,)


def batched(expr):
    def make(rng, shape, inp):
        if len(shape) != 3:
            return None
        B, _, K = shape
        N = rng.choice(ODD[:6])
        if numel(shape) * N > MAX_MATMUL or B * shape[1] * N > MAX_NUMEL:
            return None
        return expr.replace("{w}", inp((B, K, N))), (B, shape[1], N)
    return make


def plain2d(expr, bias=False):
    def make(rng, shape, inp):
        if len(shape) != 2:
            return None
        M, K = shape
        N = rng.choice(ODD[:6])
        if M * K * N > MAX_MATMUL or M * N > MAX_NUMEL:
            return None
        out = expr.replace("{w}", inp((K, N)))
        return (out.replace("{b}", inp((N,))) if bias else out), (M, N)
    return make


def t(rng, shape, inp):
    return ("{x}.t()", shape[::-1]) if len(shape) == 2 else None


def view(rng, shape, inp):
    if len(shape) < 2:
        return None
    out = (numel(shape[:-1]), shape[-1]) if rng.random() < 0.5 else (numel(shape),)
    return f"{{x}}.contiguous().view({', '.join(map(str, out))})", out


def flatten_start(rng, shape, inp):
    if len(shape) < 2:
        return None
    return "{x}.flatten(-2)", shape[:-2] + (shape[-2] * shape[-1],)


def repeat_interleave(rng, shape, inp):
    if not shape or 2 * numel(shape) > MAX_NUMEL:
        return None
    d = dim(rng, shape)
    return f"{{x}}.repeat_interleave(2, dim={d})", shape[:d] + (2 * shape[d],) + shape[d + 1:]


def embedding(rng, shape, inp):
    if len(shape) > 2:
        return None
    V = rng.choice((3, 33, 129))
    idx = inp(shape, f"torch.randint(0, {V}, ({''.join(f'{e},' for e in shape)}))")
    D = rng.choice(ODD[:6])
    if numel(shape) * D > MAX_NUMEL:
        return None
    return f"F.embedding({idx}, {inp((V, D))}) + {{x}}.unsqueeze(-1)", shape + (D,)


def module(kind):
    def make(rng, shape, inp):
        if not shape:
            return None
        n = shape[-1]
        if kind == "linear":
            N = rng.choice(ODD[:6])
            if numel(shape) * N > MAX_MATMUL or numel(shape[:-1]) * N > MAX_NUMEL:
                return None
            return f"nn.Linear({n}, {N}, bias={rng.random() < 0.5})({{x}})", shape[:-1] + (N,)
        return {"layer_norm": f"nn.LayerNorm({n})({{x}})", "rms_norm": f"nn.RMSNorm({n})({{x}})"}[kind], shape
    return make


def scores(rng, shape, inp):
    if len(shape) < 3 or numel(shape[:-1]) * shape[-2] > MAX_NUMEL or numel(shape) * shape[-2] > MAX_MATMUL:
        return None
    return "{x} @ {x}.transpose(-1, -2)", shape[:-1] + (shape[-2],)


def attention(rng, shape, inp):
    """softmax(x @ k^T) @ v written out, scaled or not: unscaled scores have no epilogue (the
    running max is of the dot product itself), and a key count equal to the head dim makes
    a transposed output's loops look like the softmax's rows."""
    if len(shape) < 2:
        return None
    *lead, L, E = shape
    T = rng.choice((1, 3, E, 33, L))
    kv = tuple(lead) + (T, E)
    if numel(lead) * L * T > MAX_NUMEL or numel(kv) > MAX_NUMEL or 2 * numel(shape) * T > MAX_MATMUL:
        return None
    scale = rng.choice(("", f" * {round(E ** -0.5, 4)}"))
    return f"torch.softmax({{x}} @ {inp(kv)}.transpose(-1, -2){scale}, -1) @ {inp(kv)}", shape


def sdpa4(rng, shape, inp):
    """Attention of 4-d heads: GQA, a float or bool mask, causal."""
    if len(shape) != 2:
        return None
    L, E = shape
    H, G = rng.choice(((2, 1), (4, 2), (3, 3)))
    T = rng.choice((1, 3, 33, L))
    if H * L * T > MAX_NUMEL or H * L * E > MAX_NUMEL or G * T * E > MAX_NUMEL:
        return None
    k, v = inp((1, G, T, E)), inp((1, G, T, E))
    mask = rng.choice(("", "float", "bool", "causal"))
    extra = {"": "", "causal": ", is_causal=True", "float": f", attn_mask={inp((L, T))}",
             "bool": f", attn_mask={inp((L, T))} > -1"}[mask]
    if mask == "causal" and T != L:
        extra = ""
    gqa = ", enable_gqa=True" if G != H else ""
    q = f"{{x}}.unsqueeze(0).unsqueeze(0).expand(1, {H}, {L}, {E})"
    return f"F.scaled_dot_product_attention({q}, {k}, {v}{extra}{gqa})", (1, H, L, E)


def stack(rng, shape, inp):
    if 2 * numel(shape) > MAX_NUMEL:
        return None
    d = rng.randrange(len(shape) + 1)
    return f"torch.stack([{{x}}, {inp(shape)}], {d})", shape[:d] + (2,) + shape[d:]


def tri(which):
    def make(rng, shape, inp):
        if len(shape) < 2:
            return None
        return f"torch.{which}({{x}}, {rng.choice((-1, 0, 1))})", shape
    return make


def cumsum(rng, shape, inp):
    return (f"torch.cumsum({{x}}, {dim(rng, shape)})", shape) if shape else None


def flip(rng, shape, inp):
    if not shape:
        return None
    dims = sorted(set(dim(rng, shape) for _ in range(rng.randint(1, len(shape)))))
    return f"torch.flip({{x}}, {tuple(dims)})", shape


def roll(rng, shape, inp):
    if not shape:
        return None
    if rng.random() < 0.25:         # no dims: the flattened tensor rolls
        return f"torch.roll({{x}}, {rng.randint(-9, 9)})", shape
    d = dim(rng, shape)
    return f"torch.roll({{x}}, {rng.randint(-2 * shape[d], 2 * shape[d])}, {d})", shape


def unflatten(rng, shape, inp):
    if not shape or shape[-1] % 3:
        return None
    return f"{{x}}.unflatten(-1, (3, {shape[-1] // 3}))", shape[:-1] + (3, shape[-1] // 3)


def repeat(rng, shape, inp):
    if not shape or 2 * numel(shape) > MAX_NUMEL:
        return None
    reps = [1] * len(shape)
    reps[dim(rng, shape)] = 2
    return f"{{x}}.repeat({', '.join(map(str, reps))})", tuple(e * r for e, r in zip(shape, reps))


def einsum(rng, shape, inp):
    if len(shape) != 3:
        return None
    B, L, K = shape
    N = rng.choice(ODD[:6])
    if B * L * K * N > MAX_MATMUL or B * L * N > MAX_NUMEL:
        return None
    return f"torch.einsum('blk,kn->bln', {{x}}, {inp((K, N))})", (B, L, N)


def baddbmm(rng, shape, inp):
    if len(shape) != 3:
        return None
    B, L, K = shape
    N = rng.choice(ODD[:6])
    if B * L * K * N > MAX_MATMUL or B * L * N > MAX_NUMEL:
        return None
    return f"torch.baddbmm({inp((B, L, N))}, {{x}}, {inp((B, K, N))}, alpha=0.5)", (B, L, N)


def sdpa(rng, shape, inp):
    if len(shape) != 3 or shape[-2] * shape[-2] * shape[0] > MAX_NUMEL:
        return None
    causal = rng.random() < 0.5
    k, v = inp(shape), inp(shape)
    return f"F.scaled_dot_product_attention({{x}}, {k}, {v}, is_causal={causal})", shape


def _index_input(inp, shape, lo, hi):
    dims = "".join(f"{e}," for e in shape)
    return inp(shape, f"torch.randint({lo}, {hi}, ({dims}))")


def argext(which):
    """argmax/argmin over a dim (kept or not) or the whole tensor, as float positions."""
    def make(rng, shape, inp):
        if not shape:
            return None
        if rng.random() < 0.25:
            return f"torch.{which}({{x}}).float()", ()
        d = dim(rng, shape)
        keep = rng.random() < 0.5
        out = shape[:d] + ((1,) if keep else ()) + shape[d + 1:]
        return f"torch.{which}({{x}}, {d - len(shape)}, keepdim={keep}).float()", out
    return make


def pick_by_argmax(rng, shape, inp):
    """gather at argmax/argmin positions (the value of the max, via its index), or the
    flattened tensor indexed at its argmax."""
    if not shape:
        return None
    which = rng.choice(("argmax", "argmin"))
    if rng.random() < 0.3:
        return f"{{x}}.flatten()[{{x}}.{which}().unsqueeze(0)] - {{x}}", shape
    d = dim(rng, shape)
    return f"torch.gather({{x}}, {d}, {{x}}.{which}({d}, keepdim=True))", shape[:d] + (1,) + shape[d + 1:]


def gather(rng, shape, inp):
    """torch.gather along d with a random index no larger than x elsewhere."""
    if not shape:
        return None
    d = dim(rng, shape)
    out = tuple(rng.choice(ODD[:5]) if p == d else rng.choice((1, e)) if rng.random() < 0.3 else e
                for p, e in enumerate(shape))
    if numel(out) > MAX_NUMEL:
        return None
    return f"torch.gather({{x}}, {d}, {_index_input(inp, out, 0, shape[d])})", out


def index_first(rng, shape, inp):
    """x[idx]: idx of rank 1 or 2 (negative entries count from the end)."""
    if not shape:
        return None
    ishape = tuple(rng.choice(ODD[:5]) for _ in range(rng.choice((1, 1, 2))))
    out = ishape + shape[1:]
    if numel(out) > MAX_NUMEL:
        return None
    return f"{{x}}[{_index_input(inp, ishape, -shape[0], shape[0])}]", out


def index_second(rng, shape, inp):
    """x[:, idx] (and x[..., idx] on the last axis)."""
    if len(shape) < 2:
        return None
    n = rng.choice(ODD[:5])
    last = rng.random() < 0.5
    d = len(shape) - 1 if last else 1
    out = shape[:d] + (n,) + shape[d + 1:]
    if numel(out) > MAX_NUMEL:
        return None
    at = "..., " if last else ":, "
    return f"{{x}}[{at}{_index_input(inp, (n,), -shape[d], shape[d])}]", out


def index_select(rng, shape, inp):
    if not shape:
        return None
    d = dim(rng, shape)
    n = rng.choice(ODD[:5])
    out = shape[:d] + (n,) + shape[d + 1:]
    if numel(out) > MAX_NUMEL:
        return None
    return f"{{x}}.index_select({d - len(shape)}, {_index_input(inp, (n,), 0, shape[d])})", out


def bool_xor(rng, shape, inp):
    """A mask combined with ^ (and logical_xor), broadcasting against a second input."""
    other = broadcast_shape(rng, shape)
    y = inp(other)
    xor = rng.choice(("({x} > 0) ^ ({y} < 0.5)", "torch.logical_xor({x} > 0, {y} > 0)",
                      "torch.bitwise_xor({x} < 0, ~({y} > 1))"))
    return f"torch.where({xor.replace('{y}', y)}, {{x}}, -{{x}})", shape


def position_ids(rng, shape, inp):
    """transformers' position ids from a padding mask: an int64 cumsum, masked, then float."""
    if not shape:
        return None
    d = dim(rng, shape) - len(shape)
    return f"(({{x}} > 0).long().cumsum({d}) - 1).masked_fill({{x}} <= 0, 1).float() * {{x}}", shape


def unfold(rng, shape, inp):
    """Tensor.unfold(d, size, step): sliding windows of one axis, a new last axis."""
    axes = [d for d, e in enumerate(shape) if e >= 2]
    if not axes or len(shape) >= 4:
        return None
    d = rng.choice(axes)
    size = rng.randint(1, min(shape[d], 8))
    step = rng.randint(1, 4)
    out = shape[:d] + ((shape[d] - size) // step + 1,) + shape[d + 1:] + (size,)
    return f"{{x}}.unfold({d - len(shape)}, {size}, {step})", out


def one_hot(rng, shape, inp):
    """Argmax routing: a one-hot of the last axis' argmax, as floats (times the value, or alone)."""
    if not shape:
        return None
    n = shape[-1] + rng.choice((0, 0, 2))
    hot = f"F.one_hot({{x}}.argmax(-1), {n})"
    if n == shape[-1] and rng.random() < 0.6:
        return f"{hot}.float() * {{x}}", shape
    # as floats: an int64 one-hot fed to float-only ops (hardswish, bmm with floats) is
    # refused by eager itself, a case wasted
    return f"{hot}.float()", shape[:-1] + (n,)


def conv1d(rng, shape, inp):
    """nn.Conv1d over (N, C, L) or (C, L): Mamba's depthwise causal form (padding k - 1, cut
    to L) or groups, stride, dilation, padding and bias drawn at random."""
    if len(shape) not in (2, 3) or shape[-1] < 2:
        return None
    c, length = shape[-2], shape[-1]
    k = rng.choice((1, 2, 3, 4))
    if rng.random() < 0.5:
        if numel(shape) * k > MAX_MATMUL:
            return None
        return f"nn.Conv1d({c}, {c}, {k}, groups={c}, padding={k - 1})({{x}})[..., :{length}]", shape
    groups = rng.choice([g for g in (1, 1, 3, c) if c % g == 0])
    c_out = groups * rng.choice((1, 2, 3)) if groups > 1 else rng.choice((1, 3, 5, 8))
    stride, dilation = rng.choice((1, 1, 2, 3)), rng.choice((1, 1, 2))
    padding = rng.randint(0, k)
    l_out = (length + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    out = shape[:-2] + (c_out, l_out)
    if l_out < 1 or numel(out) * (c // groups) * k > MAX_MATMUL:
        return None
    return (f"nn.Conv1d({c}, {c_out}, {k}, stride={stride}, padding={padding}, dilation={dilation}, "
            f"groups={groups}, bias={rng.random() < 0.5})({{x}})"), out


def in_place_add(rng, shape, inp):
    """Falcon's x.add_(y) on a whole tensor, y broadcast."""
    y = inp(broadcast_shape(rng, shape))
    return f"torch.tanh({{x}}).add_({y})", shape


def overwritten_empty(rng, shape, inp):
    """empty_like filled whole by copy_ (a broadcast source), beside ones/zeros/full_like."""
    y = inp(broadcast_shape(rng, shape))
    return (f"torch.empty_like({{x}}).copy_({y}) * torch.ones_like({{x}}) + torch.zeros_like({{x}}) "
            f"- torch.full_like({{x}}, 0.5) + {{x}}"), shape
def moe_routing(rng, shape, inp):
    """A mixture-of-experts block on the value's rows (tokens of its last axis): a biased
    router, softmax then top-k (renormalised) or top-k then softmax, the assignments sorted
    by expert and counted into runs (histc, cumsum), two grouped matmuls with SiLU between,
    the routing weights, and the rows scattered back (index_put) and summed per token.
    The router's bias keeps equal logits (rows of zeros) from tying: torch leaves the order
    of tied top-k values unspecified (docs/moe.md)."""
    if not shape:
        return None
    hidden, tokens = shape[-1], numel(shape[:-1])
    experts = rng.choice((2, 3, 4, 5, 8))
    k = rng.randint(1, min(experts, 3))
    inner = rng.choice((1, 3, 16, 31))
    rows = tokens * k
    if rows > 256 or rows * hidden * inner * 2 > MAX_MATMUL or rows * max(hidden, experts) > MAX_NUMEL:
        return None
    router, bias = inp((experts, hidden)), inp((experts,))
    up, down = inp((experts, hidden, inner)), inp((experts, inner, hidden))
    if rng.random() < 0.5:      # Mixtral, Qwen3-MoE: softmax, top-k, renormalised
        pick = f"torch.topk(torch.softmax(h @ r.t() + b, -1), {k}, dim=-1)"
        weigh = "tk[0] / tk[0].sum(-1, keepdim=True)"
    else:                       # top-k of the logits, softmax over the chosen
        pick, weigh = f"torch.topk(h @ r.t() + b, {k})", "torch.softmax(tk[0], -1)"
    gmm = "torch.ops.deplokit.grouped_mm"
    # one expression: lambdas name the intermediate values (every tensor comes in as an argument)
    combine = (f"h.new_zeros({rows}, {hidden}).index_put_((s[1],), {gmm}(F.silu({gmm}(h[s[1] // {k}], up, offs)), "
               f"dn, offs) * w.reshape(-1)[s[1], None]).reshape({tokens}, {k}, {hidden}).sum(1)"
               f".reshape({', '.join(map(str, shape))})")
    counts = f"torch.cumsum(torch.histc(s[0].float(), {experts}, 0, {experts - 1}), 0, dtype=torch.int32)"
    expr = (f"(lambda h, r, b, up, dn: (lambda tk: (lambda w, s: (lambda offs: {combine})({counts}))"
            f"({weigh}, torch.sort(tk[1].reshape(-1), stable=True)))({pick}))"
            f"({{x}}.reshape(-1, {hidden}), {router}, {bias}, {up}, {down})")
    return expr, shape
