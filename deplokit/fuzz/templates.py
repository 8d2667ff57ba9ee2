"""Op templates for the fuzzer: each makes one random call of covered ops on a value.

A template names the Torch-IR ops it emits; the fuzzer uses it only when the decompose
registry has a rule for every one of them (`covered_templates`), so the fuzzer follows the
registry's coverage instead of a list of its own. `make(rng, shape, new_input)` returns the
call as text with `{x}` for the value, and the result's shape, or None where it does not
apply; `new_input(shape)` names a fresh random input the call may read.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.ops import OPS
from ..passes.decompose import program  # noqa: F401  (importing it registers every rule)
from ..passes.decompose import registry as reg
from . import integers as ints
from . import makers as mk
from .limits import broadcast_shape, dim


@dataclass(frozen=True)
class Template:
    name: str
    ops: tuple[str, ...]            # the Torch-IR ops it emits (registry keys)
    make: object                    # (rng, shape, new_input) -> (expr with {x}, shape) or None


def _unary(expr):
    return lambda rng, shape, inp: (expr, shape)


def _binary(expr, scalar_ok=True):
    def make(rng, shape, inp):
        other = broadcast_shape(rng, shape)
        tensor = other or rng.random() < 0.5 or not scalar_ok
        y = inp(other) if tensor else str(round(rng.uniform(-2, 2), 3))
        return expr.replace("{y}", y), shape
    return make


def _reduce(expr, keep_allowed=True):
    def make(rng, shape, inp):
        if not shape:
            return None
        d = dim(rng, shape) if rng.random() < 0.5 else len(shape) - 1
        keep = keep_allowed and rng.random() < 0.5
        out = shape[:d] + ((1,) if keep else ()) + shape[d + 1:]
        return expr.format(x="{x}", d=d - len(shape), keep=keep), out
    return make


def _pad(rng, shape, inp):
    """F.pad of the last axis (and the one before it, at times), a negative amount cropping."""
    if not shape:
        return None
    axes = 1 if len(shape) == 1 or rng.random() < 0.5 else 2
    amounts = [rng.randint(-1 if shape[-1 - k // 2] > 2 else 0, 3) for k in range(2 * axes)]
    out = list(shape)
    for k in range(axes):
        out[-1 - k] += amounts[2 * k] + amounts[2 * k + 1]
    return f"F.pad({{x}}, {tuple(amounts)}, value={round(rng.uniform(-1, 1), 2)})", tuple(out)


def _cosine_similarity(rng, shape, inp):
    if not shape:
        return None
    d = dim(rng, shape)
    other = inp(broadcast_shape(rng, shape))
    return f"F.cosine_similarity({{x}}, {other}, {d - len(shape)})", shape[:d] + shape[d + 1:]


def _rowwise(expr):
    def make(rng, shape, inp):
        if not shape:
            return None
        d = rng.choice([-1, -1, dim(rng, shape) - len(shape)])
        return expr.format(x="{x}", d=d, n=shape[-1]), shape
    return make


# each float primitive alone (ir/ops.py `fuzz`), in the order the fuzzer has always drawn them
_ORDER = ("relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "reciprocal", "neg", "sin", "cos", "erf")
_PRIMITIVES = tuple(Template(op.name, (op.name,) + op.fuzz_also, _unary(op.fuzz))
                    for op in sorted((op for op in OPS.values() if op.fuzz),
                                     key=lambda op: _ORDER.index(op.name) if op.name in _ORDER else len(_ORDER)))

TEMPLATES = (
    Template("square", ("square",), _unary("torch.square({x})")),
    Template("relu6", ("relu6", "hardtanh"), _unary("F.relu6({x} * 4)")),
    Template("leaky_relu", ("leaky_relu",), _unary("F.leaky_relu({x}, 0.2)")),
    Template("softplus", ("softplus",), _unary("F.softplus({x})")),
    Template("mish", ("mish",), _unary("F.mish({x})")),
    Template("hardswish", ("hardswish",), _unary("F.hardswish({x} * 3)")),
    Template("hardsigmoid", ("hardsigmoid",), _unary("F.hardsigmoid({x} * 3)")),
    Template("clamp_min_max", ("clamp_min", "clamp_max"), _unary("{x}.clamp_min(-1).clamp_max(1)")),
    Template(
        "bool_ops",
        ("bitwise_and", "bitwise_or", "bitwise_not", "where", "gt", "lt"),
        _unary("torch.where(~(({x} > 1) | ({x} < -1)) & ({x} > -0.5), {x}, 0.0)"),
    ),
    Template("var", ("var",), _reduce("{x}.var({d}, keepdim={keep})")),
    Template("std", ("std",), _reduce("{x}.std({d}, keepdim={keep})")),
    Template("logsumexp", ("logsumexp",), _reduce("torch.logsumexp({x}, {d}, keepdim={keep})")),
    Template("normalize", ("vector_norm",), _rowwise("F.normalize({x}, dim={d})")),
    Template("tril", ("tril",), mk.tri("tril")),
    Template("triu", ("triu",), mk.tri("triu")),
    Template("cumsum", ("cumsum",), mk.cumsum),
    Template("flip", ("flip",), mk.flip),
    Template("roll", ("roll",), mk.roll),
    Template("sign", ("sign",), _unary("torch.sign({x})")),
    Template("all", ("all", "gt", "to"), _reduce("({x} > -1.5).all({d}, keepdim={keep}).float()")),
    Template("any", ("any", "gt", "to"), _reduce("({x} > 1.5).any({d}, keepdim={keep}).float()")),
    Template("lerp", ("lerp",), _binary("torch.lerp({x}, {y}, 0.3)", scalar_ok=False)),
    Template("lerp_tensor", ("lerp", "sigmoid"), _binary("torch.lerp({x}, {y}, torch.sigmoid({x}))", scalar_ok=False)),
    Template("addcmul", ("addcmul",), _binary("torch.addcmul({x}, {y}, {x}, value=0.5)", scalar_ok=False)),
    Template("addcdiv", ("addcdiv", "abs", "add"), _binary("torch.addcdiv({x}, {x}, {y}.abs() + 1)", scalar_ok=False)),
    Template("atan2", ("atan2",), _binary("torch.atan2({x}, {y})", scalar_ok=False)),
    Template("hypot", ("hypot",), _binary("torch.hypot({x}, {y})", scalar_ok=False)),
    Template("clamp_tensor", ("clamp_tensor",), _binary("{x}.clamp(min={y})", scalar_ok=False)),
    Template("logaddexp", ("logaddexp",), _binary("torch.logaddexp({x}, {y})", scalar_ok=False)),
    Template("pad", ("pad",), _pad),
    Template("cosine_similarity", ("cosine_similarity",), _cosine_similarity),
    Template("hardshrink", ("hardshrink",), _unary("F.hardshrink({x})")),
    Template("softshrink", ("softshrink",), _unary("F.softshrink({x}, 0.3)")),
    Template("threshold", ("threshold",), _unary("F.threshold({x}, 0.1, 2.0)")),
    Template("xlogy", ("xlogy", "abs"), _binary("torch.xlogy({x}, {y}.abs())", scalar_ok=False)),
    Template("sinc", ("sinc",), _unary("torch.sinc({x})")),
    Template("isfinite", ("isfinite", "div", "gt", "to"), _unary("torch.isfinite({x} / ({x} > 0.3)).float()")),
    Template("count_nonzero", ("count_nonzero", "gt", "to"), _reduce("torch.count_nonzero({x} > 0.5, {d}).float()",
                                                                     keep_allowed=False)),
    Template("var_mean", ("var", "mean", "add"), _reduce("sum(torch.var_mean({x}, {d}, keepdim={keep}))")),
    Template("elu", ("elu",), _unary("F.elu({x}, 0.5)")),
    Template("selu", ("selu",), _unary("F.selu({x})")),
    Template("celu", ("celu",), _unary("F.celu({x}, 2.0)")),
    Template("log_sigmoid", ("log_sigmoid",), _unary("F.logsigmoid({x})")),
    Template("frac", ("frac", "mul"), _unary("torch.frac({x} * 3)")),
    Template("floor", ("floor", "mul"), _unary("torch.floor({x} * 3)")),
    Template("ceil", ("ceil", "mul"), _unary("torch.ceil({x} * 3)")),
    Template("round", ("round", "mul"), _unary("torch.round({x} * 2)")),     # ties at the halves
    Template("trunc", ("trunc", "mul"), _unary("torch.trunc({x} * 3)")),
    # NaN where |x| <= 0.3, +-inf past it up to 0.6: each of nan_to_num's three replacements,
    # with numbers that later ops do not overflow on (the defaults, the format's largest, are
    # tests/test_ops.py's)
    Template("nan_to_num", ("nan_to_num", "mul", "abs", "gt", "div"),
             _unary("torch.nan_to_num({x} * ({x}.abs() > 0.3) / ({x}.abs() > 0.6), 0.5, 4.0, -4.0)")),
    Template("position_ids", ("cumsum", "gt", "le", "to", "sub", "masked_fill", "mul"), mk.position_ids),
    Template("stack", ("stack",), mk.stack),
    Template("unflatten", ("unflatten",), mk.unflatten),
    Template("repeat", ("repeat",), mk.repeat),
    Template("expand_as", ("expand_as",), _unary("{x}.expand_as({x})")),
    Template("einsum", ("einsum",), mk.einsum),
    Template("baddbmm", ("baddbmm",), mk.baddbmm),
    *_PRIMITIVES,
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
    Template(
        "where_eq", ("where", "eq", "ne"), _unary("torch.where(torch.logical_or({x} == 0, {x} != {x}), 1.0, {x})")
    ),
    Template(
        "logical",
        ("where", "logical_and", "logical_or", "logical_not", "gt", "lt"),
        _unary(
            "torch.where(torch.logical_or(torch.logical_and({x} > -1, {x} < 1), torch.logical_not({x} < 2)), {x}, 0.5)"
        ),
    ),
    Template("reuse", ("mul", "relu"), _unary("{x} * torch.relu({x})")),
    Template("reuse_clone", ("mul", "clone", "relu"), _unary("(lambda v: v.clone() * v)(torch.relu({x}))")),
    Template("residual_norm", ("add", "rms_norm"), _rowwise("{x} + F.rms_norm({x}, ({n},))")),
    Template("detach", ("detach",), _unary("{x}.detach()")),
    Template("to_float", ("to",), _unary("{x}.to(torch.float32)")),
    Template("t", ("t",), mk.t),
    Template("view", ("view", "contiguous"), mk.view),
    Template("flatten", ("flatten",), mk.flatten_start),
    Template("repeat_interleave", ("repeat_interleave",), mk.repeat_interleave),
    Template("mm", ("mm",), mk.plain2d("torch.mm({x}, {w})")),
    Template("addmm", ("addmm",), mk.plain2d("torch.addmm({b}, {x}, {w})", bias=True)),
    Template("bmm", ("bmm",), mk.batched("torch.bmm({x}, {w})")),
    Template("sum", ("sum",), _reduce("{x}.sum({d}, keepdim={keep})")),
    Template("mean", ("mean",), _reduce("{x}.mean({d}, keepdim={keep})")),
    Template("amax", ("amax",), _reduce("{x}.amax({d}, keepdim={keep})")),
    Template("amin", ("amin",), _reduce("{x}.amin({d}, keepdim={keep})")),
    Template("softmax", ("softmax",), _rowwise("torch.softmax({x}, {d})")),
    Template("log_softmax", ("log_softmax",), _rowwise("F.log_softmax({x}, {d})")),
    Template("layer_norm", ("layer_norm",), _rowwise("F.layer_norm({x}, ({n},))")),
    Template("rms_norm", ("rms_norm",), _rowwise("F.rms_norm({x}, ({n},), eps=1e-5)")),
    Template("transpose", ("transpose",), mk.transpose),
    Template("permute", ("permute",), mk.permute),
    Template("reshape", ("reshape",), mk.flatten),
    Template("unsqueeze", ("unsqueeze",), mk.unsqueeze),
    Template("squeeze", ("squeeze",), mk.squeeze),
    Template("expand", ("expand",), mk.expand),
    Template("slice", ("slice",), mk.slice),
    Template("select", ("select",), mk.select),
    Template("cat", ("cat",), mk.cat),
    Template("matmul", ("matmul",), mk.matmul("{x} @ {w}")),
    Template("linear", ("linear",), mk.matmul("F.linear({x}, {w}, {b})", with_bias=True)),
    Template("reshaped_k_matmul", ("transpose", "reshape", "matmul", "linear"), mk.reshaped_k),
    Template("sliced_k_matmul", ("slice", "matmul", "linear"), mk.sliced_k),
    Template("embedding", ("embedding", "unsqueeze", "add"), mk.embedding),
    Template("sdpa", ("scaled_dot_product_attention",), mk.sdpa),
    Template("sdpa_heads", ("scaled_dot_product_attention", "unsqueeze", "expand", "gt"), mk.sdpa4),
    Template("scores", ("matmul", "transpose"), mk.scores),
    Template("attention", ("matmul", "transpose", "softmax", "mul"), mk.attention),
    Template("nn_linear", ("linear",), mk.module("linear")),
    Template("nn_layer_norm", ("layer_norm",), mk.module("layer_norm")),
    Template("nn_rms_norm", ("rms_norm",), mk.module("rms_norm")),
    Template("argmax", ("argmax", "to"), mk.argext("argmax")),
    Template("argmin", ("argmin", "to"), mk.argext("argmin")),
    Template(
        "pick_by_argmax", ("argmax", "argmin", "gather", "index", "sub", "unsqueeze", "flatten"), mk.pick_by_argmax
    ),
    Template("gather", ("gather",), mk.gather),
    Template("moe_routing", ("topk", "softmax", "sort", "histc", "cumsum", "grouped_mm", "index_put", "index",
                             "floor_divide", "silu", "sum", "div", "mul", "reshape"), mk.moe_routing),
    Template("index", ("index",), mk.index_first),
    Template("index_dim", ("index",), mk.index_second),
    Template("index_select", ("index",), mk.index_select),
    Template("bitwise_xor", ("bitwise_xor", "bitwise_not", "where", "gt", "lt", "neg"), mk.bool_xor),
    Template(
        "int_divmod",
        ("where", "eq", "clamp", "to", "mul", "add", "sub", "abs", "neg", "floor_divide", "remainder"),
        ints.divmod_,
    ),
    Template("int_reduce", ("where", "eq", "clamp", "to", "mul", "sum", "amax", "amin"), ints.reduce),
    Template(
        "nan_inf",
        ("where", "gt", "lt"),
        _unary("torch.where({x} > 1.8, float('nan'), torch.where({x} < -2.2, float('-inf'), {x}))"),
    ),
    Template("unfold", ("unfold",), mk.unfold),
    Template("one_hot", ("one_hot", "argmax", "to", "mul"), mk.one_hot),
    Template("conv1d", ("conv1d", "slice"), mk.conv1d),
    Template("add_", ("tanh", "add"), mk.in_place_add),
    Template("empty_like_copy", ("copy", "mul", "add", "sub"), mk.overwritten_empty),
    Template("float_divmod", ("mul", "abs", "add", "neg", "floor_divide", "remainder"), ints.float_divmod),
)


def covered_templates(registry=None) -> tuple[Template, ...]:
    """The templates whose every op has a decompose rule."""
    if registry is None:
        registry = reg.RULES
    return tuple(t for t in TEMPLATES if all(op in registry for op in t.ops))


def uncovered_rules(registry=None) -> tuple[str, ...]:
    """Registry ops no template exercises (a note for whoever extends the fuzzer)."""
    if registry is None:
        registry = reg.RULES
    used = {op for t in TEMPLATES for op in t.ops}
    return tuple(sorted(set(registry) - used))
