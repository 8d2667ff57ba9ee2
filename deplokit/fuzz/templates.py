"""Op templates for the fuzzer: each makes one random call of covered ops on a value.

A template names the Torch-IR ops it emits; the fuzzer uses it only when the decompose
registry has a rule for every one of them (`covered_templates`), so the fuzzer follows the
registry's coverage instead of a list of its own. `make(rng, shape, new_input)` returns the
call as text with `{x}` for the value, and the result's shape, or None where it does not
apply; `new_input(shape)` names a fresh random input the call may read.
"""
from __future__ import annotations

from dataclasses import dataclass

# Odd extents: 1, warp +-1, block +-1.
ODD = (1, 3, 31, 33, 127, 129, 1000)
MAX_NUMEL = 40_000          # elements of any one value (simulator time) ...
MAX_MATMUL = 600_000        # M * N * K of a generated matmul


@dataclass(frozen=True)
class Template:
    name: str
    ops: tuple[str, ...]            # the Torch-IR ops it emits (registry keys)
    make: object                    # (rng, shape, new_input) -> (expr with {x}, shape) or None


def _dim(rng, shape):
    return rng.randrange(len(shape)) if shape else None


def _unary(expr):
    return lambda rng, shape, inp: (expr, shape)


def _binary(expr, scalar_ok=True):
    def make(rng, shape, inp):
        other = tuple(1 if rng.random() < 0.3 else e for e in shape)[rng.randrange(len(shape) + 1):] if shape else ()
        tensor = other or rng.random() < 0.5 or not scalar_ok
        y = inp(other) if tensor else str(round(rng.uniform(-2, 2), 3))
        return expr.replace("{y}", y), shape
    return make


def _reduce(expr, keep_allowed=True):
    def make(rng, shape, inp):
        if not shape:
            return None
        d = _dim(rng, shape) if rng.random() < 0.5 else len(shape) - 1
        keep = keep_allowed and rng.random() < 0.5
        out = shape[:d] + ((1,) if keep else ()) + shape[d + 1:]
        return expr.format(x="{x}", d=d - len(shape), keep=keep), out
    return make


def _rowwise(expr):
    def make(rng, shape, inp):
        if not shape:
            return None
        d = rng.choice([-1, -1, _dim(rng, shape) - len(shape)])
        return expr.format(x="{x}", d=d, n=shape[-1]), shape
    return make


def _transpose(rng, shape, inp):
    if len(shape) < 2:
        return None
    a, b = rng.sample(range(len(shape)), 2)
    out = list(shape)
    out[a], out[b] = out[b], out[a]
    return f"{{x}}.transpose({a}, {b})", tuple(out)


def _permute(rng, shape, inp):
    if len(shape) < 2:
        return None
    order = list(range(len(shape)))
    rng.shuffle(order)
    return f"{{x}}.permute({', '.join(map(str, order))})", tuple(shape[i] for i in order)


def _flatten(rng, shape, inp):
    if len(shape) < 2:
        return None
    return "{x}.reshape(" + ", ".join(map(str, shape[:-2] + (shape[-2] * shape[-1],))) + ")", \
        shape[:-2] + (shape[-2] * shape[-1],)


def _unsqueeze(rng, shape, inp):
    if len(shape) >= 4:
        return None
    d = rng.randrange(len(shape) + 1)
    return f"{{x}}.unsqueeze({d})", shape[:d] + (1,) + shape[d:]


def _squeeze(rng, shape, inp):
    ones = [d for d, e in enumerate(shape) if e == 1]
    if not ones:
        return None
    d = rng.choice(ones)
    return f"{{x}}.squeeze({d})", shape[:d] + shape[d + 1:]


def _expand(rng, shape, inp):
    ones = [d for d, e in enumerate(shape) if e == 1]
    if not ones:
        return None
    d = rng.choice(ones)
    n = rng.choice((3, 5, 31))
    out = shape[:d] + (n,) + shape[d + 1:]
    if numel(out) > MAX_NUMEL:
        return None
    return f"{{x}}.expand({', '.join(map(str, out))})", out


def _slice(rng, shape, inp):
    if not shape or shape[-1] < 2:
        return None
    d = _dim(rng, shape)
    if shape[d] < 2:
        return None
    lo = rng.randrange(shape[d] // 2)
    hi = rng.randrange(lo + 1, shape[d] + 1)
    step = rng.choice((1, 1, 2, 3))
    lead = ":, " * d
    return f"{{x}}[{lead}{lo}:{hi}:{step}]", shape[:d] + (len(range(lo, hi, step)),) + shape[d + 1:]


def _select(rng, shape, inp):
    if len(shape) < 2:
        return None
    i = rng.randrange(shape[0])
    return f"{{x}}[{i}]", shape[1:]


def _cat(rng, shape, inp):
    if not shape or 2 * numel(shape) > MAX_NUMEL:
        return None
    d = _dim(rng, shape)
    other = shape[:d] + (rng.choice((1, 3, 33)),) + shape[d + 1:]
    out = shape[:d] + (shape[d] + other[d],) + shape[d + 1:]
    return f"torch.cat([{{x}}, {inp(other)}], {d})", out


def _matmul(expr, with_bias=False):
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


def _batched(expr):
    def make(rng, shape, inp):
        if len(shape) != 3:
            return None
        B, _, K = shape
        N = rng.choice(ODD[:6])
        if numel(shape) * N > MAX_MATMUL or B * shape[1] * N > MAX_NUMEL:
            return None
        return expr.replace("{w}", inp((B, K, N))), (B, shape[1], N)
    return make


def _plain2d(expr, bias=False):
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


def _t(rng, shape, inp):
    return ("{x}.t()", shape[::-1]) if len(shape) == 2 else None


def _view(rng, shape, inp):
    if len(shape) < 2:
        return None
    out = (numel(shape[:-1]), shape[-1]) if rng.random() < 0.5 else (numel(shape),)
    return f"{{x}}.contiguous().view({', '.join(map(str, out))})", out


def _flatten_start(rng, shape, inp):
    if len(shape) < 2:
        return None
    return "{x}.flatten(-2)", shape[:-2] + (shape[-2] * shape[-1],)


def _repeat_interleave(rng, shape, inp):
    if not shape or 2 * numel(shape) > MAX_NUMEL:
        return None
    d = _dim(rng, shape)
    return f"{{x}}.repeat_interleave(2, dim={d})", shape[:d] + (2 * shape[d],) + shape[d + 1:]


def _embedding(rng, shape, inp):
    if len(shape) > 2:
        return None
    V = rng.choice((3, 33, 129))
    idx = inp(shape, f"torch.randint(0, {V}, ({''.join(f'{e},' for e in shape)}))")
    D = rng.choice(ODD[:6])
    if numel(shape) * D > MAX_NUMEL:
        return None
    return f"F.embedding({idx}, {inp((V, D))}) + {{x}}.unsqueeze(-1)", shape + (D,)


def _module(kind):
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


def _scores(rng, shape, inp):
    if len(shape) < 3 or numel(shape[:-1]) * shape[-2] > MAX_NUMEL or numel(shape) * shape[-2] > MAX_MATMUL:
        return None
    return "{x} @ {x}.transpose(-1, -2)", shape[:-1] + (shape[-2],)


def _sdpa4(rng, shape, inp):
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


def _sdpa(rng, shape, inp):
    if len(shape) != 3 or shape[-2] * shape[-2] * shape[0] > MAX_NUMEL:
        return None
    causal = rng.random() < 0.5
    k, v = inp(shape), inp(shape)
    return f"F.scaled_dot_product_attention({{x}}, {k}, {v}, is_causal={causal})", shape


TEMPLATES = (
    Template("relu", ("relu",), _unary("torch.relu({x})")),
    Template("sigmoid", ("sigmoid",), _unary("torch.sigmoid({x})")),
    Template("tanh", ("tanh",), _unary("torch.tanh({x})")),
    Template("exp", ("exp", "clamp"), _unary("torch.exp({x}.clamp(-20, 20))")),
    Template("log", ("log", "abs", "add"), _unary("torch.log({x}.abs() + 1)")),
    Template("sqrt", ("sqrt", "abs"), _unary("torch.sqrt({x}.abs())")),
    Template("rsqrt", ("rsqrt", "abs", "add"), _unary("torch.rsqrt({x}.abs() + 0.5)")),
    Template("reciprocal", ("reciprocal", "abs", "add"), _unary("torch.reciprocal({x}.abs() + 0.5)")),
    Template("neg", ("neg",), _unary("-{x}")),
    Template("sin", ("sin",), _unary("torch.sin({x})")),
    Template("cos", ("cos",), _unary("torch.cos({x})")),
    Template("erf", ("erf",), _unary("torch.erf({x})")),
    Template("silu", ("silu",), _unary("F.silu({x})")),
    Template("gelu", ("gelu",), _unary("F.gelu({x})")),
    Template("gelu_tanh", ("gelu",), _unary("F.gelu({x}, approximate='tanh')")),
    Template("pow2", ("pow",), _unary("{x}.pow(2)")),
    Template("clamp", ("clamp",), _unary("{x}.clamp(-0.5, 1.5)")),
    Template("rsub", ("rsub",), _unary("1 - {x}")),
    Template("clone", ("clone",), _unary("{x}.clone()")),
    Template("contiguous", ("contiguous",), _unary("{x}.contiguous()")),
    Template("dropout_eval", ("dropout",), _unary("F.dropout({x}, 0.1, training=False)")),
    Template("add", ("add",), _binary("{x} + {y}")),
    Template("sub", ("sub",), _binary("{x} - {y}")),
    Template("mul", ("mul",), _binary("{x} * {y}")),
    Template("div", ("div", "abs", "add"), _binary("{x} / ({y}.abs() + 0.5)", scalar_ok=False)),
    Template("maximum", ("maximum",), _binary("torch.maximum({x}, {y})", scalar_ok=False)),
    Template("where", ("where", "gt"), _binary("torch.where({x} > 0, {x}, {y})")),
    Template("masked_fill", ("masked_fill", "lt"), _unary("{x}.masked_fill({x} < -1, -1.0)")),
    Template("minimum", ("minimum",), _binary("torch.minimum({x}, {y})", scalar_ok=False)),
    Template("where_ge", ("where", "ge"), _binary("torch.where({x} >= {y}, {y}, {x})")),
    Template("where_le", ("where", "le"), _binary("torch.where({x} <= 0.25, {x} * 2, {y})")),
    Template("where_eq", ("where", "eq", "ne"), _unary("torch.where(torch.logical_or({x} == 0, {x} != {x}), 1.0, {x})")),
    Template("logical", ("where", "logical_and", "logical_or", "logical_not", "gt", "lt"),
             _unary("torch.where(torch.logical_or(torch.logical_and({x} > -1, {x} < 1), "
                    "torch.logical_not({x} < 2)), {x}, 0.5)")),
    Template("reuse", ("mul", "relu"), _unary("{x} * torch.relu({x})")),
    Template("reuse_clone", ("mul", "clone", "relu"), _unary("(lambda v: v.clone() * v)(torch.relu({x}))")),
    Template("residual_norm", ("add", "rms_norm"), _rowwise("{x} + F.rms_norm({x}, ({n},))")),
    Template("detach", ("detach",), _unary("{x}.detach()")),
    Template("to_float", ("to",), _unary("{x}.to(torch.float32)")),
    Template("t", ("t",), _t),
    Template("view", ("view", "contiguous"), _view),
    Template("flatten", ("flatten",), _flatten_start),
    Template("repeat_interleave", ("repeat_interleave",), _repeat_interleave),
    Template("mm", ("mm",), _plain2d("torch.mm({x}, {w})")),
    Template("addmm", ("addmm",), _plain2d("torch.addmm({b}, {x}, {w})", bias=True)),
    Template("bmm", ("bmm",), _batched("torch.bmm({x}, {w})")),
    Template("sum", ("sum",), _reduce("{x}.sum({d}, keepdim={keep})")),
    Template("mean", ("mean",), _reduce("{x}.mean({d}, keepdim={keep})")),
    Template("amax", ("amax",), _reduce("{x}.amax({d}, keepdim={keep})")),
    Template("amin", ("amin",), _reduce("{x}.amin({d}, keepdim={keep})")),
    Template("softmax", ("softmax",), _rowwise("torch.softmax({x}, {d})")),
    Template("log_softmax", ("log_softmax",), _rowwise("F.log_softmax({x}, {d})")),
    Template("layer_norm", ("layer_norm",), _rowwise("F.layer_norm({x}, ({n},))")),
    Template("rms_norm", ("rms_norm",), _rowwise("F.rms_norm({x}, ({n},), eps=1e-5)")),
    Template("transpose", ("transpose",), _transpose),
    Template("permute", ("permute",), _permute),
    Template("reshape", ("reshape",), _flatten),
    Template("unsqueeze", ("unsqueeze",), _unsqueeze),
    Template("squeeze", ("squeeze",), _squeeze),
    Template("expand", ("expand",), _expand),
    Template("slice", ("slice",), _slice),
    Template("select", ("select",), _select),
    Template("cat", ("cat",), _cat),
    Template("matmul", ("matmul",), _matmul("{x} @ {w}")),
    Template("linear", ("linear",), _matmul("F.linear({x}, {w}, {b})", with_bias=True)),
    Template("embedding", ("embedding", "unsqueeze", "add"), _embedding),
    Template("sdpa", ("scaled_dot_product_attention",), _sdpa),
    Template("sdpa_heads", ("scaled_dot_product_attention", "unsqueeze", "expand", "gt"), _sdpa4),
    Template("scores", ("matmul", "transpose"), _scores),
    Template("nn_linear", ("linear",), _module("linear")),
    Template("nn_layer_norm", ("layer_norm",), _module("layer_norm")),
    Template("nn_rms_norm", ("rms_norm",), _module("rms_norm")),
)


def covered_templates(registry=None) -> tuple[Template, ...]:
    """The templates whose every op has a decompose rule."""
    if registry is None:
        from ..passes.decompose import registry as reg
        import deplokit.passes.decompose  # noqa: F401  (registers the rules)
        registry = reg.RULES
    return tuple(t for t in TEMPLATES if all(op in registry for op in t.ops))


def uncovered_rules(registry=None) -> tuple[str, ...]:
    """Registry ops no template exercises (a note for whoever extends the fuzzer)."""
    if registry is None:
        from ..passes.decompose import registry as reg
        import deplokit.passes.decompose  # noqa: F401
        registry = reg.RULES
    used = {op for t in TEMPLATES for op in t.ops}
    return tuple(sorted(set(registry) - used))


def numel(shape) -> int:
    n = 1
    for e in shape:
        n *= e
    return n
