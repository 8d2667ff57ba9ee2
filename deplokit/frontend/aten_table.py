"""How each captured aten operator maps to a Torch-IR node: its name and its operands.

A normaliser receives the fx node's args and kwargs (fx Nodes already replaced by tensor
names) and returns (args, attrs): tensor names and scalars in `args`, options in `attrs`.
"""
from __future__ import annotations

from typing import Any, Callable

from ..ir.ops import OPS

Normaliser = Callable[[tuple, dict], tuple[tuple, tuple]]


def _positional(names: tuple[str, ...], defaults: dict[str, Any], n_operands: int) -> Normaliser:
    """Operands are the first n args; the rest become attrs under `names`, defaults dropped."""
    def norm(args, kwargs):
        ops = tuple(a for a in args[:n_operands])
        rest = list(args[n_operands:])
        attrs = []
        for i, key in enumerate(names):
            value = rest[i] if i < len(rest) else kwargs.get(key, defaults.get(key))
            if key in defaults and value == defaults[key]:
                continue
            attrs.append((key, _freeze(value)))
        return ops, tuple(attrs)
    return norm


def _freeze(v):
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


def _unary(args, kwargs):
    return (args[0],), ()


def _binary(args, kwargs):
    alpha = args[2] if len(args) > 2 else kwargs.get("alpha", 1)
    attrs = () if alpha == 1 else (("alpha", alpha),)
    return (args[0], args[1]), attrs


def _optional_operands(n: int, names: tuple[str, ...], defaults: dict) -> Normaliser:
    """Like _positional, but trailing tensor operands may be None and are then left out."""
    def norm(args, kwargs):
        ops = tuple(a for a in args[:n] if a is not None)
        flags = tuple((f"has_{k}", False) for k, a in zip(("weight", "bias"), args[1:n]) if a is None)
        _, attrs = _positional(names, defaults, n)(args, kwargs)
        return ops, attrs + flags
    return norm


def _sdpa(args, kwargs):
    names = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    vals = dict(zip(names, args[3:]))
    vals.update({k: v for k, v in kwargs.items() if k in names})
    ops = tuple(args[:3])
    if vals.get("attn_mask") is not None:
        ops = ops + (vals["attn_mask"],)
    attrs = []
    if vals.get("is_causal"):
        attrs.append(("is_causal", True))
    if vals.get("scale") is not None:
        attrs.append(("scale", vals["scale"]))
    if vals.get("enable_gqa"):
        attrs.append(("enable_gqa", True))
    if vals.get("dropout_p", 0.0):
        attrs.append(("dropout_p", vals["dropout_p"]))
    return ops, tuple(attrs)


def _cat(args, kwargs):
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    return tuple(args[0]), (("dim", dim),)


def _reduce(args, kwargs):
    dims = args[1] if len(args) > 1 else kwargs.get("dim", None)
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    dims = tuple(dims) if isinstance(dims, (list, tuple)) else ((dims,) if dims is not None else ())
    return (args[0],), (("dim", dims), ("keepdim", bool(keepdim)))


def _where(args, kwargs):
    return tuple(args[:3]), ()


def _masked_fill(args, kwargs):
    return (args[0], args[1], args[2]), ()


def _clamp(args, kwargs):
    lo = args[1] if len(args) > 1 else kwargs.get("min")
    hi = args[2] if len(args) > 2 else kwargs.get("max")
    return (args[0],), (("min", lo), ("max", hi))


def _clamp_tensor(args, kwargs):
    """clamp(x, min, max) with tensor bounds (either may be None): the bounds are operands."""
    lo = args[1] if len(args) > 1 else kwargs.get("min")
    hi = args[2] if len(args) > 2 else kwargs.get("max")
    return (args[0],) + tuple(t for t in (lo, hi) if t is not None), (("has_min", lo is not None),
                                                                        ("has_max", hi is not None))


def _argsort(args, kwargs):
    dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
    descending = args[2] if len(args) > 2 else kwargs.get("descending", False)
    return (args[0],), (("dim", dim), ("descending", bool(descending)), ("output", "indices"))


def _named(args, kwargs, names: tuple[str, ...]) -> dict:
    """The arguments after the input by name, positional or keyword."""
    vals = dict(zip(names, args[1:]))
    vals.update({k: v for k, v in kwargs.items() if k in names})
    return vals


def _affine(operands: tuple, vals: dict) -> tuple[tuple, tuple]:
    """A norm's operands followed by the weight and bias it was given, and the has_ flags
    that say which (the rule pops them in that order)."""
    weight, bias = vals.get("weight"), vals.get("bias")
    return operands + tuple(t for t in (weight, bias) if t is not None), (
        ("has_weight", weight is not None), ("has_bias", bias is not None))


def _group_norm(args, kwargs):
    """group_norm(x, num_groups, weight, bias, eps)."""
    vals = _named(args, kwargs, ("num_groups", "weight", "bias", "eps"))
    ops, flags = _affine((args[0],), vals)
    return ops, (("num_groups", vals["num_groups"]), ("eps", vals.get("eps", 1e-5))) + flags


def _instance_norm(args, kwargs):
    """instance_norm from the input's own statistics: group_norm with a group per channel
    (num_groups 0); from running statistics it is refused."""
    vals = _named(args, kwargs, ("weight", "bias", "running_mean", "running_var", "use_input_stats", "momentum",
                                 "eps"))
    if not vals.get("use_input_stats", True):
        raise TypeError("instance_norm from running statistics (track_running_stats in eval mode)")
    ops, flags = _affine((args[0],), vals)
    return ops, (("num_groups", 0), ("eps", vals.get("eps", 1e-5))) + flags


def _batch_norm(args, kwargs):
    """batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)."""
    vals = _named(args, kwargs, ("weight", "bias", "running_mean", "running_var", "training", "momentum", "eps"))
    if vals.get("running_mean") is None or vals.get("running_var") is None:
        raise TypeError("batch_norm without running statistics (batch statistics)")
    ops, flags = _affine((args[0], vals["running_mean"], vals["running_var"]), vals)
    return ops, (("training", bool(vals.get("training", False))), ("eps", vals.get("eps", 1e-5))) + flags


def _last_two(args, kwargs):
    """x.mT, x.mH (real tensors), x.adjoint(): the last two axes swapped."""
    return (args[0],), (("dim0", -2), ("dim1", -1))


def _copy(args, kwargs):
    return (args[0],), ()


# pooling's arguments after the input, and torch's defaults (stride () is the kernel size)
_POOL_AVG = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad")
_POOL_MAX = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
_POOL_DEFAULTS = {"stride": (), "padding": 0, "dilation": 1, "ceil_mode": False, "count_include_pad": True,
                  "divisor_override": None}


# aten packet.overload -> (Torch-IR op, normaliser)
ATEN_OPS: dict[str, tuple[str, Normaliser]] = {
    "linear.default": ("linear", _optional_operands(3, (), {})),
    "matmul.default": ("matmul", lambda a, k: ((a[0], a[1]), ())),
    "mm.default": ("mm", lambda a, k: ((a[0], a[1]), ())),
    "bmm.default": ("bmm", lambda a, k: ((a[0], a[1]), ())),
    "addmm.default": ("addmm", _positional(("beta", "alpha"), {"beta": 1, "alpha": 1}, 3)),
    "rms_norm.default": ("rms_norm", lambda a, k: _rms_norm(a, k)),
    "layer_norm.default": ("layer_norm", lambda a, k: _layer_norm(a, k)),
    "softmax.int": ("softmax", _positional(("dim",), {}, 1)),
    "_softmax.default": ("softmax", _positional(("dim",), {}, 1)),
    "log_softmax.int": ("log_softmax", _positional(("dim",), {}, 1)),
    "_log_softmax.default": ("log_softmax", _positional(("dim",), {}, 1)),
    "scaled_dot_product_attention.default": ("scaled_dot_product_attention", _sdpa),
    "embedding.default": ("embedding", lambda a, k: ((a[0], a[1]), ())),
    "gelu.default": ("gelu", _positional(("approximate",), {"approximate": "none"}, 1)),
    "pow.Tensor_Scalar": ("pow", lambda a, k: ((a[0], a[1]), ())),
    "pow.Tensor_Tensor": ("pow", lambda a, k: ((a[0], a[1]), ())),
    "pow.Scalar": ("pow", lambda a, k: ((a[0], a[1]), ())),
    "where.self": ("where", _where),
    "where.ScalarSelf": ("where", _where),
    "where.ScalarOther": ("where", _where),
    "where.Scalar": ("where", _where),
    "masked_fill.Scalar": ("masked_fill", _masked_fill),
    "masked_fill.Tensor": ("masked_fill", _masked_fill),
    "clamp.default": ("clamp", _clamp),
    "mean.dim": ("mean", _reduce),
    "mean.default": ("mean", _reduce),
    "sum.dim_IntList": ("sum", _reduce),
    "sum.default": ("sum", _reduce),
    "amax.default": ("amax", _reduce),
    "amin.default": ("amin", _reduce),
    "all.default": ("all", _reduce),
    "all.dim": ("all", _reduce),
    "all.dims": ("all", _reduce),
    "any.default": ("any", _reduce),
    "any.dim": ("any", _reduce),
    "any.dims": ("any", _reduce),
    "transpose.int": ("transpose", _positional(("dim0", "dim1"), {}, 1)),
    "t.default": ("t", _unary),
    "numpy_T.default": ("t", _unary),
    "permute.default": ("permute", _positional(("dims",), {}, 1)),
    "view.default": ("view", _positional(("shape",), {}, 1)),
    "reshape.default": ("reshape", _positional(("shape",), {}, 1)),
    "_unsafe_view.default": ("view", _positional(("shape",), {}, 1)),
    "flatten.using_ints": ("flatten", _positional(("start_dim", "end_dim"), {"start_dim": 0, "end_dim": -1}, 1)),
    "unsqueeze.default": ("unsqueeze", _positional(("dim",), {}, 1)),
    "squeeze.dim": ("squeeze", lambda a, k: ((a[0],), (("dim", (a[1],)),))),
    "squeeze.dims": ("squeeze", lambda a, k: ((a[0],), (("dim", tuple(a[1])),))),
    "squeeze.default": ("squeeze", lambda a, k: ((a[0],), (("dim", None),))),
    "expand.default": ("expand", _positional(("size",), {}, 1)),
    "broadcast_to.default": ("expand", _positional(("size",), {}, 1)),     # expand's rule, as torch
    "repeat_interleave.self_int": ("repeat_interleave",
                                   _positional(("repeats", "dim", "output_size"), {"output_size": None}, 1)),
    "slice.Tensor": ("slice", _positional(("dim", "start", "end", "step"), {"step": 1}, 1)),
    "select.int": ("select", _positional(("dim", "index"), {}, 1)),
    "cat.default": ("cat", _cat),
    "to.dtype": ("to", _copy),
    "to.dtype_layout": ("to", _copy),
    "_to_copy.default": ("to", _copy),
    "contiguous.default": ("contiguous", _copy),
    "clone.default": ("clone", _copy),
    "alias.default": ("alias", _copy),
    "detach.default": ("detach", _copy),
    "lift_fresh_copy.default": ("clone", _copy),
    "type_as.default": ("to", _copy),
    "dropout.default": ("dropout", _copy),
}

# silu has a rule of its own; the others are primitives one to one (ir/ops.py `aten`)
for _name in ("silu",) + tuple(a for op in OPS.values() for a in op.aten):
    ATEN_OPS[f"{_name}.default"] = (_name, _unary)

for _aten, _op in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "div"),
                   ("rsub", "rsub"), ("maximum", "maximum"), ("minimum", "minimum"),
                   ("gt", "gt"), ("lt", "lt"), ("ge", "ge"), ("le", "le"), ("eq", "eq"),
                   ("ne", "ne"), ("logical_and", "logical_and"), ("logical_or", "logical_or"),
                   ("floor_divide", "floor_divide"), ("remainder", "remainder"), ("atan2", "atan2"),
                   ("hypot", "hypot")):
    ATEN_OPS[f"{_aten}.Tensor"] = (_op, _binary)
    ATEN_OPS[f"{_aten}.Scalar"] = (_op, _binary)
    ATEN_OPS[f"{_aten}.default"] = (_op, _binary)

# torch.div(a, b, rounding_mode=...): "floor" is floor_divide; "trunc" rounds toward zero
for _mode in ("Tensor_mode", "Scalar_mode"):
    ATEN_OPS[f"div.{_mode}"] = ("div", _positional(("rounding_mode",), {"rounding_mode": None}, 2))

ATEN_OPS.update({
    "to.device": ("to", _copy),
    "index.Tensor": ("index", lambda a, k: _index(a, k)),
    "gather.default": ("gather", lambda a, k: ((a[0], a[2]), (("dim", a[1]),))),
    # x.index_select(d, idx) is x[:, ..., idx] with idx on axis d
    "index_select.default": ("index", lambda a, k: ((a[0], a[2]), (("dims", (a[1],)),))),
    "stack.default": ("stack", lambda a, k: (tuple(a[0]), (("dim", a[1] if len(a) > 1 else k.get("dim", 0)),))),
    "unflatten.int": ("unflatten", _positional(("dim", "sizes"), {}, 1)),
    "narrow.default": ("slice", lambda a, k: ((a[0],), (("dim", a[1]), ("start", a[2]), ("end", a[2] + a[3])))),
    "repeat.default": ("repeat", _positional(("repeats",), {}, 1)),
    "square.default": ("square", _unary),
    "baddbmm.default": ("baddbmm", _positional(("beta", "alpha"), {"beta": 1, "alpha": 1}, 3)),
    "relu6.default": ("relu6", _unary),
    "hardtanh.default": ("hardtanh", _positional(("min_val", "max_val"), {}, 1)),
    "leaky_relu.default": ("leaky_relu", _positional(("negative_slope",), {}, 1)),
    "softplus.default": ("softplus", _positional(("beta", "threshold"), {"beta": 1, "threshold": 20}, 1)),
    "mish.default": ("mish", _unary),
    "hardswish.default": ("hardswish", _unary),
    "hardsigmoid.default": ("hardsigmoid", _unary),
    "var.dim": ("var", lambda a, k: variance_attrs(a, k, unbiased=True)),
    "var.default": ("var", lambda a, k: variance_attrs(a, k, unbiased=True, whole=True)),
    "var.correction": ("var", lambda a, k: variance_attrs(a, k)),
    "std.dim": ("std", lambda a, k: variance_attrs(a, k, unbiased=True)),
    "std.default": ("std", lambda a, k: variance_attrs(a, k, unbiased=True, whole=True)),
    "std.correction": ("std", lambda a, k: variance_attrs(a, k)),
    "linalg_vector_norm.default": ("vector_norm", lambda a, k: _vector_norm(a, k)),
    "clamp_min.default": ("clamp_min", lambda a, k: ((a[0],), (("min", a[1]),))),
    "clamp_max.default": ("clamp_max", lambda a, k: ((a[0],), (("max", a[1]),))),
    "expand_as.default": ("expand_as", lambda a, k: ((a[0],), ())),
    "logsumexp.default": ("logsumexp", _reduce),
    "tril.default": ("tril", _positional(("diagonal",), {"diagonal": 0}, 1)),
    "triu.default": ("triu", _positional(("diagonal",), {"diagonal": 0}, 1)),
    "einsum.default": ("einsum", lambda a, k: (tuple(a[1]), (("equation", a[0]),))),
    "argmax.default": ("argmax", _positional(("dim", "keepdim"), {"keepdim": False}, 1)),
    "argmin.default": ("argmin", _positional(("dim", "keepdim"), {"keepdim": False}, 1)),
    "max.default": ("amax", lambda a, k: ((a[0],), (("dim", ()), ("keepdim", False)))),
    "min.default": ("amin", lambda a, k: ((a[0],), (("dim", ()), ("keepdim", False)))),
    "cumsum.default": ("cumsum", _positional(("dim",), {}, 1)),
    "flip.default": ("flip", _positional(("dims",), {}, 1)),
    "roll.default": ("roll", _positional(("shifts", "dims"), {"dims": ()}, 1)),
    "fliplr.default": ("flip", lambda a, k: ((a[0],), (("dims", (1,)),))),
    "flipud.default": ("flip", lambda a, k: ((a[0],), (("dims", (0,)),))),
    "sign.default": ("sign", _unary),
    "floor.default": ("floor", _unary),
    "ceil.default": ("ceil", _unary),
    "round.default": ("round", _unary),
    "trunc.default": ("trunc", _unary),
    "fix.default": ("trunc", _unary),
    "frac.default": ("frac", _unary),
    "clip.default": ("clamp", _clamp),
    "clamp.Tensor": ("clamp_tensor", lambda a, k: _clamp_tensor(a, k)),
    "clip.Tensor": ("clamp_tensor", lambda a, k: _clamp_tensor(a, k)),
    "lerp.Scalar": ("lerp", lambda a, k: ((a[0], a[1]), (("weight", a[2]),))),
    "lerp.Tensor": ("lerp", lambda a, k: ((a[0], a[1], a[2]), ())),
    "addcmul.default": ("addcmul", _positional(("value",), {"value": 1}, 3)),
    "addcdiv.default": ("addcdiv", _positional(("value",), {"value": 1}, 3)),
    "glu.default": ("glu", _positional(("dim",), {"dim": -1}, 1)),
    "elu.default": ("elu", _positional(("alpha", "scale", "input_scale"), {"alpha": 1, "scale": 1, "input_scale": 1},
                                       1)),
    "selu.default": ("selu", _unary),
    "celu.default": ("celu", _positional(("alpha",), {"alpha": 1.0}, 1)),
    "log_sigmoid.default": ("log_sigmoid", _unary),
    "outer.default": ("outer", lambda a, k: ((a[0], a[1]), ())),
    "tile.default": ("repeat", _positional(("repeats",), {}, 1)),
    "pad.default": ("pad", _positional(("pad", "mode", "value"), {"mode": "constant", "value": None}, 1)),
    "constant_pad_nd.default": ("pad", _positional(("pad", "value"), {"value": 0}, 1)),
    "cosine_similarity.default": ("cosine_similarity", _positional(("dim", "eps"), {"dim": 1, "eps": 1e-8}, 2)),
    "diag.default": ("diag", _positional(("diagonal",), {"diagonal": 0}, 1)),
    "logaddexp.default": ("logaddexp", lambda a, k: ((a[0], a[1]), ())),
    "group_norm.default": ("group_norm", lambda a, k: _group_norm(a, k)),
    "instance_norm.default": ("group_norm", lambda a, k: _instance_norm(a, k)),
    "batch_norm.default": ("batch_norm", lambda a, k: _batch_norm(a, k)),
    "isnan.default": ("isnan", _unary),
    "isinf.default": ("isinf", _unary),
    "isfinite.default": ("isfinite", _unary),
    "special_expit.default": ("sigmoid", _unary),
    "deg2rad.default": ("deg2rad", _unary),
    "rad2deg.default": ("rad2deg", _unary),
    "hardshrink.default": ("hardshrink", _positional(("lambd",), {"lambd": 0.5}, 1)),
    "softshrink.default": ("softshrink", _positional(("lambd",), {"lambd": 0.5}, 1)),
    "threshold.default": ("threshold", _positional(("threshold", "value"), {}, 1)),
    "xlogy.Tensor": ("xlogy", lambda a, k: ((a[0], a[1]), ())),
    "sinc.default": ("sinc", _unary),
    "count_nonzero.default": ("count_nonzero", _positional(("dim",), {"dim": None}, 1)),
    "count_nonzero.dim_IntList": ("count_nonzero", _positional(("dim",), {"dim": None}, 1)),
    "trace.default": ("trace", _unary),
    "dist.default": ("dist", _positional(("p",), {"p": 2}, 2)),
    "mT.default": ("transpose", _last_two),
    "mH.default": ("transpose", _last_two),
    "adjoint.default": ("transpose", _last_two),
    "avg_pool1d.default": ("avg_pool1d", _positional(_POOL_AVG, _POOL_DEFAULTS, 1)),
    "avg_pool2d.default": ("avg_pool2d", _positional(_POOL_AVG + ("divisor_override",), _POOL_DEFAULTS, 1)),
    "max_pool1d.default": ("max_pool1d", _positional(_POOL_MAX, _POOL_DEFAULTS, 1)),
    "max_pool2d.default": ("max_pool2d", _positional(_POOL_MAX, _POOL_DEFAULTS, 1)),
    # argsort: sort's indices
    "argsort.default": ("sort", lambda a, k: _argsort(a, k)),
    "argsort.stable": ("sort", lambda a, k: _argsort(a, k)),
    "nan_to_num.default": ("nan_to_num", _positional(("nan", "posinf", "neginf"),
                                                     {"nan": None, "posinf": None, "neginf": None}, 1)),
    "unfold.default": ("unfold", _positional(("dim", "size", "step"), {}, 1)),
    "one_hot.default": ("one_hot", lambda a, k: _one_hot(a, k)),
    "conv1d.default": ("conv1d", lambda a, k: _conv1d(a, k)),
    "conv1d.padding": ("conv1d", lambda a, k: _conv1d(a, k)),
    # dest.copy_(src) as its functional twin (capture's _functional): dest's old values are
    # not read, so dest is no operand; the rule broadcasts src to the result's shape and dtype
    "copy.default": ("copy", lambda a, k: ((a[1],), ())),
    # mixture of experts (docs/moe.md): the counting, the scatter and transformers' grouped matmul
    "histc.default": ("histc", _positional(("bins", "min", "max"), {"bins": 100, "min": 0, "max": 0}, 1)),
    "index_put.default": ("index_put", lambda a, k: _index_put(a, k)),
    "transformers.grouped_mm_fallback.default": ("grouped_mm", lambda a, k: ((a[0], a[1], a[2]), ())),
    "deplokit.grouped_mm.default": ("grouped_mm", lambda a, k: ((a[0], a[1], a[2]), ())),   # bench/programs.py
})
for _aten, _op in (("__and__", "bitwise_and"), ("bitwise_and", "bitwise_and"), ("__or__", "bitwise_or"),
                   ("bitwise_or", "bitwise_or"), ("__xor__", "bitwise_xor"), ("bitwise_xor", "bitwise_xor"),
                   ("logical_xor", "bitwise_xor")):
    ATEN_OPS[f"{_aten}.Tensor"] = (_op, _binary)
    ATEN_OPS[f"{_aten}.Scalar"] = (_op, _binary)
ATEN_OPS["logical_xor.default"] = ("bitwise_xor", _binary)     # torch.logical_xor(a, b)
ATEN_OPS["__invert__.default"] = ("bitwise_not", _unary)
ATEN_OPS["bitwise_not.default"] = ("bitwise_not", _unary)

# Operators whose result depends only on their input's shape and dtype: folded at capture
# (empty_like as zeros: no garbage in the IR).
SHAPE_ONLY_OPS = {"empty_like.default", "ones_like.default", "zeros_like.default", "full_like.default",
                  "new_ones.default", "new_zeros.default", "new_full.default", "scalar_tensor.default", "full.default",
                  "zeros.default", "ones.default"}

# Operators whose values are undefined until written: folded like SHAPE_ONLY_OPS only where
# the first thing that touches the result is a copy_ that overwrites all of it (capture checks).
OVERWRITTEN_OPS = {"empty_like.default"}

# Operators whose result shares its input's storage: an in-place update of one would change
# the input too (capture refuses to functionalise it).
VIEW_OPS = {"view.default", "_unsafe_view.default", "reshape.default", "transpose.int", "t.default",
            "mT.default", "mH.default", "adjoint.default",
            "numpy_T.default", "permute.default", "slice.Tensor", "select.int", "unsqueeze.default",
            "squeeze.dim", "squeeze.dims", "squeeze.default", "expand.default", "broadcast_to.default",
            "flatten.using_ints",
            "alias.default", "detach.default", "unflatten.int", "narrow.default", "contiguous.default",
            "split.Tensor", "split_with_sizes.default", "chunk.default", "unbind.int", "unfold.default"}

# Operators that only assert facts about the graph: dropped at capture.
IGNORED_OPS = {"_assert_tensor_metadata.default", "_assert_scalar.default",
               "sym_constrain_range_for_size.default", "_assert_async.msg"}


def _rms_norm(args, kwargs):
    x, shape = args[0], args[1]
    weight = args[2] if len(args) > 2 else kwargs.get("weight")
    eps = args[3] if len(args) > 3 else kwargs.get("eps")
    ops = (x,) if weight is None else (x, weight)
    attrs = [("normalized_shape", tuple(shape)), ("eps", eps)]
    if weight is None:
        attrs.append(("has_weight", False))
    return ops, tuple(attrs)


def _layer_norm(args, kwargs):
    x, shape = args[0], args[1]
    weight = args[2] if len(args) > 2 else kwargs.get("weight")
    bias = args[3] if len(args) > 3 else kwargs.get("bias")
    eps = args[4] if len(args) > 4 else kwargs.get("eps", 1e-5)
    ops = (x,) + tuple(t for t in (weight, bias) if t is not None)
    attrs = [("normalized_shape", tuple(shape)), ("eps", eps)]
    if weight is None:
        attrs.append(("has_weight", False))
    if bias is None:
        attrs.append(("has_bias", False))
    return ops, tuple(attrs)


def _one_hot(args, kwargs):
    n = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
    if n < 0:   # the class count would be the data's max + 1: a shape known only at run time
        raise TypeError("one_hot needs num_classes (without it the class count depends on the data)")
    return (args[0],), (("num_classes", n),)


def _conv1d(args, kwargs):
    """conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1); padding
    "same" becomes its left pad (the right one is what the result's length leaves)."""
    names = ("stride", "padding", "dilation", "groups")
    vals = dict(zip(names, args[3:]))
    vals.update({k: v for k, v in kwargs.items() if k in names})
    bias = args[2] if len(args) > 2 else kwargs.get("bias")
    attrs = []
    for key, default in (("stride", 1), ("padding", 0), ("dilation", 1), ("groups", 1)):
        v = vals.get(key, default)
        v = v[0] if isinstance(v, (list, tuple)) and len(v) == 1 else v
        attrs.append((key, _freeze(v)))
    return (args[0], args[1]) + ((bias,) if bias is not None else ()), tuple(attrs)


def _index(args, kwargs):
    """x[i0, None, i2]: x and the index tensors as operands; `dims` says which axes they index."""
    indices = list(args[1])
    dims = tuple(p for p, i in enumerate(indices) if i is not None)
    return (args[0],) + tuple(i for i in indices if i is not None), (("dims", dims),)


def _index_put(args, kwargs):
    """x.index_put_((i0, None, ..), values, accumulate): x, values and the index tensors as
    operands; `dims` says which axes they index."""
    indices = list(args[1])
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    dims = tuple(p for p, i in enumerate(indices) if i is not None)
    return ((args[0], args[2]) + tuple(i for i in indices if i is not None),
            (("dims", dims), ("accumulate", bool(accumulate))))


def variance_attrs(args, kwargs, unbiased: bool = False, whole: bool = False):
    """var / std (and var_mean / std_mean: multi_output.py) in their three spellings:
    (x, unbiased), (x, dim, unbiased, keepdim) and (x, dim, correction=, keepdim=); torch's
    default correction is 1."""
    if whole:
        correction = int(args[1] if len(args) > 1 else kwargs.get("unbiased", True))
        return (args[0],), (("dim", ()), ("correction", correction), ("keepdim", False))
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    if unbiased:
        flag = args[2] if len(args) > 2 else kwargs.get("unbiased", True)
        correction, keepdim = int(bool(flag)), args[3] if len(args) > 3 else kwargs.get("keepdim", False)
    else:
        correction = kwargs.get("correction")
        correction = 1 if correction is None else correction
        keepdim = kwargs.get("keepdim", False)
    dims = tuple(dims) if isinstance(dims, (list, tuple)) else ((dims,) if dims is not None else ())
    return (args[0],), (("dim", dims), ("correction", correction), ("keepdim", bool(keepdim)))


def _vector_norm(args, kwargs):
    vals = _named(args, kwargs, ("ord", "dim", "keepdim"))
    dims = vals.get("dim")
    dims = tuple(dims) if isinstance(dims, (list, tuple)) else ((dims,) if dims is not None else ())
    return (args[0],), (("ord", vals.get("ord", 2)), ("dim", dims), ("keepdim", bool(vals.get("keepdim", False))))


# Torch-IR ops made only from pieces of a multi-output op (frontend/multi_output.py).
PIECE_OPS = ("topk", "sort")


def covered_ops() -> list[str]:
    return sorted({op for op, _ in ATEN_OPS.values()} | set(PIECE_OPS))
