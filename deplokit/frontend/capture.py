"""Capture: torch.export of a module or function → Torch IR, plus the tensor values the
program needs (parameters, buffers, folded constants) as numpy arrays.

Nodes that depend on no user input and no parameter (aranges, rotary tables, causal masks)
are evaluated here with torch and become constants: they depend only on shapes.
"""
from __future__ import annotations

import contextlib
import inspect
import keyword
import operator
from dataclasses import dataclass

import numpy as np
import torch
from torch.export.graph_signature import InputKind

from ..errors import CaptureError, DynamicShapeError, UnsupportedDtypeError, UnsupportedOpError
from ..ir.c_names import c_safe, tensor_name_ok
from ..ir.torch_ir import TorchOp, TorchProgram
from ..ir.types import Buffer, TensorType
from .aten_table import ATEN_OPS, IGNORED_OPS, OVERWRITTEN_OPS, SHAPE_ONLY_OPS, VIEW_OPS, covered_ops
from .multi_output import FRESH_PIECES, MULTI_OUTPUT_OPS
from .positions import Positions

_DTYPES = {torch.float32: "float32", torch.int64: "int64", torch.int32: "int32", torch.bool: "bool",
           torch.bfloat16: "bfloat16", torch.float16: "float16"}


@dataclass(frozen=True)
class Captured:
    program: TorchProgram
    values: dict            # name -> np.ndarray for every param and const buffer
    input_names: tuple[str, ...]
    out_spec: object        # pytree spec of the module's return value (tensor, tuple, dict)


class FunctionModule(torch.nn.Module):
    """Wraps a plain function; forward takes the function's own argument names so the
    captured inputs are called x, bias, w rather than args_0, args_1, args_2."""

    def __init__(self, fn, n_inputs: int):
        super().__init__()
        self.fn = fn
        names = argument_names(fn, n_inputs)
        src = f"def forward(self, {', '.join(names)}):\n    return self.fn({', '.join(names)})\n"
        scope: dict = {}
        exec(src, scope)
        self.forward = scope["forward"].__get__(self)


def as_module(module_or_fn, n_inputs: int) -> torch.nn.Module:
    """What torch.export is given: a module as it is, a function wrapped in a FunctionModule."""
    return module_or_fn if isinstance(module_or_fn, torch.nn.Module) else FunctionModule(module_or_fn, n_inputs)


def argument_names(module_or_fn, n: int) -> list[str]:
    """The names the n captured inputs get: the function's (or forward's) positional
    parameter names, or x0, x1, ... when those are missing, repeated or unusable."""
    fn = module_or_fn.forward if isinstance(module_or_fn, torch.nn.Module) else module_or_fn
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:n]]
    if len(names) < n or len(set(names)) < n or any(keyword.iskeyword(x) or x in ("self", "fn") for x in names):
        names = [f"x{i}" for i in range(n)]
    return names


def capture(module_or_fn, example_inputs: tuple, scalars: tuple[str, ...] = (), scalar_limit: int = 0) -> Captured:
    """`scalars`: the inputs (by captured name) that are runtime scalars, each a (1,) int64
    tensor: a decode position. Values computed from one (`pos + arange(n)`, views of it)
    are tracked symbolically, so that an index_copy_ into a module buffer at such a position
    becomes an in-place write into a state buffer (frontend/positions.py). `scalar_limit` > 0:
    the scalars lie in 0 .. scalar_limit - 1, and values computed from them and constants only
    (rotary tables) are tabulated over that range."""
    for i, t in enumerate(example_inputs):
        if not isinstance(t, torch.Tensor):
            raise CaptureError(f"example input {i} is a {type(t).__name__}; deplokit takes tensors only")
        _check_dtype(t.dtype, f"example input {i}")
    names = argument_names(module_or_fn, len(example_inputs))
    for name in scalars:
        if name not in names:
            raise CaptureError(f"runtime scalar {name} is not an input; inputs: {', '.join(names)}")
        t = example_inputs[names.index(name)]
        if tuple(t.shape) != (1,) or t.dtype != torch.int64:
            raise CaptureError(f"runtime scalar {name} is {tuple(t.shape)} {str(t.dtype).replace('torch.', '')}; "
                               "a runtime scalar is a (1,) int64 tensor")
    module = as_module(module_or_fn, len(example_inputs))
    was_training = module.training
    try:
        module.eval()
    except NotImplementedError:   # torch.export(...).module(): exported already, its mode fixed
        was_training = None
    try:
        with torch.no_grad(), _no_stack_traces():
            ep = torch.export.export(module, tuple(example_inputs), strict=False)
    except Exception as e:  # torch raises many types here; all mean "could not capture"
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "data-dependent" in str(e) or "symbolic" in str(e).lower() or "GuardOnDataDependent" in type(e).__name__:
            raise DynamicShapeError(f"shape depends on tensor data, which deplokit cannot compile: {msg}") from None
        raise CaptureError(f"torch.export could not capture the program: {type(e).__name__}: {msg}") from None
    finally:
        if was_training is not None:
            module.train(was_training)
    return _convert(ep, tuple(scalars), scalar_limit)


@contextlib.contextmanager
def _no_stack_traces():
    """torch.export without the Python stack trace of every node: nothing here reads
    node.meta["stack_trace"] (errors name the module path, nn_module_stack), and extracting
    and formatting a traceback per traced op is about a fifth of exporting a model.
    torch.fx.config.do_not_emit_stack_traces is a plain module flag (torch >= 2.12; setting
    it on an older torch changes nothing)."""
    config = torch.fx.config
    saved = getattr(config, "do_not_emit_stack_traces", None)
    config.do_not_emit_stack_traces = True
    try:
        yield
    finally:
        if saved is None:
            del config.do_not_emit_stack_traces
        else:
            config.do_not_emit_stack_traces = saved


def _check_dtype(dtype, where: str) -> str:
    if dtype not in _DTYPES:
        raise UnsupportedDtypeError(
            f"{where} has dtype {str(dtype).replace('torch.', '')}; deplokit computes in float32 "
            f"(supported: float32, bfloat16/float16 stored and computed in float32, and int64/int32/bool "
            f"for indices and masks)")
    return _DTYPES[dtype]


# A comparison of half tensors with a Python number runs in the half dtype in eager: the number
# rounds to it first (x_bf16 < -2.2 compares with -2.203125), so the Torch IR records it rounded.
COMPARISONS = ("gt", "lt", "ge", "le", "eq", "ne")


def half_comparison_scalars(args, fx_args) -> tuple:
    dtypes = {a.meta["val"].dtype for a in fx_args
              if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)}
    if len(dtypes) != 1 or not dtypes <= {torch.bfloat16, torch.float16}:
        return tuple(args)
    half = dtypes.pop()
    return tuple(float(torch.tensor(a, dtype=half)) if isinstance(a, (int, float)) and not isinstance(a, bool)
                 else a for a in args)


def _tensor_type(val, where: str, empty_ok: bool = True) -> TensorType:
    """`val`'s TensorType. A tensor without elements may only be an intermediate (an empty
    slice cat drops); a buffer (input, parameter, output) needs one."""
    shape = []
    for s in val.shape:
        if not isinstance(s, int):
            raise DynamicShapeError(f"{where} has a dynamic dimension {s}; deplokit compiles static shapes only")
        shape.append(int(s))
    numel = 1
    for s in shape:
        numel *= s
    if numel == 0 and not empty_ok:
        raise CaptureError(f"{where} has shape {tuple(shape)}, with no elements; deplokit compiles "
                           f"tensors of at least one element")
    if numel > MAX_ELEMENTS:
        raise CaptureError(f"{where} has shape {tuple(shape)}: {numel} elements, more than {MAX_ELEMENTS} "
                           f"(2**48); deplokit compiles tensors up to 2**48 elements")
    return TensorType(tuple(shape), _check_dtype(val.dtype, where))


# Kernels index a tensor of 2**31 elements or more with 64-bit offsets (passes/lower/
# index_width.py); past 2**48 elements (1 PiB of floats) no device holds the tensor anyway.
MAX_ELEMENTS = 2**48


def _convert(ep, scalars: tuple[str, ...] = (), scalar_limit: int = 0) -> Captured:
    sig = ep.graph_signature
    kinds = {spec.arg.name: spec for spec in sig.input_specs}
    state = dict(ep.state_dict)
    state.update(ep.constants)

    # Concrete torch values of everything foldable; fx node name -> tensor.
    folded: dict[str, torch.Tensor] = {}
    buffers: list[Buffer] = []
    values: dict[str, np.ndarray] = {}
    ops: list[TorchOp] = []
    input_names: list[str] = []
    names: dict[str, str] = {}     # fx node name -> Torch-IR name (aliases are resolved)
    ir_name = _CSafeNames(n.name for n in ep.graph.nodes)
    pending: dict[str, tuple] = {}  # multi-output op -> (aten key, node), until getitem reads it
    positions = Positions(ir_name, folded, buffers, values, ops, names,
                          tensor_type=_tensor_type, to_numpy=_to_numpy, module_path=_module_path)
    positions.limit = scalar_limit

    for node in ep.graph.nodes:
        if node.op == "placeholder":
            spec = kinds[node.name]
            ttype = _tensor_type(node.meta["val"], f"input {node.name}", empty_ok=False)
            if spec.kind == InputKind.USER_INPUT and node.name in scalars:
                if ttype != TensorType((1,), "int64"):
                    raise CaptureError(f"runtime scalar {node.name} is {ttype}; "
                                       "a runtime scalar is a (1,) int64 tensor")
                buffers.append(Buffer(ir_name[node.name], ttype, "scalar"))
                input_names.append(ir_name[node.name])
                positions.start(node.name, ir_name[node.name])
            elif spec.kind == InputKind.USER_INPUT:
                buffers.append(Buffer(ir_name[node.name], ttype, "input"))
                input_names.append(ir_name[node.name])
            elif spec.kind == InputKind.PARAMETER:
                buffers.append(Buffer(ir_name[node.name], ttype, "param"))
                if not state[spec.target].is_meta:   # weights on the meta device: compile-only, no values
                    values[ir_name[node.name]] = _to_numpy(state[spec.target])
            else:  # buffers and lifted constants: module state that is not trained
                folded[node.name] = state[spec.target]
            names[node.name] = ir_name[node.name]
        elif node.op == "call_function":
            key = _aten_key(node.target)
            if key in IGNORED_OPS:
                continue
            if positions.track(node, key):     # pos + offset, or a write at it: handled there
                continue
            if key in OVERWRITTEN_OPS:     # empty_like: zeros stand in for what copy_ overwrites
                _check_overwritten(node, key)
                v = node.meta["val"]
                folded[node.name] = torch.zeros(tuple(v.shape), dtype=v.dtype)
                names[node.name] = ir_name[node.name]
                continue
            tensor_inputs = [a for a in node.all_input_nodes]
            if (all(a.name in folded for a in tensor_inputs) or key in SHAPE_ONLY_OPS) and not _is_random(key):
                folded[node.name] = _evaluate(node, folded, shape_only=key in SHAPE_ONLY_OPS)
                if key.split(".")[0] in ("empty", "empty_like", "new_empty"):   # no garbage in the IR
                    folded[node.name] = torch.zeros_like(folded[node.name])
                names[node.name] = ir_name[node.name]
                continue
            val = node.meta.get("val")
            if key in MULTI_OUTPUT_OPS:     # read piece by piece through getitem, below
                pending[node.name] = (key, node)
                continue
            if node.target is operator.getitem:
                if not node.users:      # a piece nobody reads (max's indices when only values are used)
                    continue
                key, node = _piece(node, pending, names)
                tensor_inputs, mutated = node.all_input_nodes, None
            else:
                key, mutated = _functional(key, node)
            if isinstance(val, torch.Tensor):   # a data-dependent shape is reported as such first
                _tensor_type(val, f"aten.{key} (node {node.name})")
            if key not in ATEN_OPS and key not in _PIECE_KEYS:
                raise UnsupportedOpError(
                    f"operator aten.{key} (node {node.name}{_module_path(node)}) is not supported; "
                    f"`deplokit ops` (deplokit.frontend.aten_table.covered_ops()) lists the {len(covered_ops())} "
                    "supported ops")
            op_name, normalise = ATEN_OPS[key] if key in ATEN_OPS else _PIECE_KEYS[key]
            # Folded inputs that reach a real op become constant buffers.
            for a in tensor_inputs:
                if a.name in folded and ir_name[a.name] not in values:
                    t = folded[a.name]
                    buffers.append(Buffer(ir_name[a.name], _tensor_type(t, f"constant {a.name}"), "const"))
                    values[ir_name[a.name]] = _to_numpy(t)
            args = _map_args(node.args, names)
            kwargs = {k: _map_args(v, names) for k, v in node.kwargs.items()}
            try:
                targs, attrs = normalise(args, kwargs)
            except (IndexError, KeyError, TypeError) as e:
                raise UnsupportedOpError(
                    f"operator aten.{key} (node {node.name}) called in an unsupported form: {e}"
                ) from None
            if op_name in COMPARISONS:
                targs = half_comparison_scalars(targs, node.args)
            if not isinstance(val, torch.Tensor):
                raise UnsupportedOpError(f"operator aten.{key} (node {node.name}) returns several values; "
                                         "deplokit supports single-tensor operators")
            ops.append(TorchOp(ir_name[node.name], op_name, tuple(targs), tuple(attrs),
                               _tensor_type(val, f"{op_name} (node {node.name})")))
            names[node.name] = ir_name[node.name]
            if mutated is not None:     # later reads of the updated tensor read the new value
                names[mutated.name] = ir_name[node.name]
                folded.pop(mutated.name, None)     # which is no constant any more
        elif node.op == "output":
            outs = node.args[0]
            outs = outs if isinstance(outs, (list, tuple)) else (outs,)
            outputs = []
            for o in outs:
                if isinstance(o, torch.fx.Node):
                    positions.materialise(o)
                if not isinstance(o, torch.fx.Node):
                    raise CaptureError(f"output {o!r} is not a tensor; deplokit programs return tensors")
                if isinstance(o.meta.get("val"), torch.Tensor):
                    _tensor_type(o.meta["val"], f"output {o.name}", empty_ok=False)
                if o.name in folded and ir_name[o.name] not in values:
                    t = folded[o.name]
                    buffers.append(Buffer(ir_name[o.name], _tensor_type(t, f"output {o.name}"), "const"))
                    values[ir_name[o.name]] = _to_numpy(t)
                outputs.append(names[o.name])
        elif node.op == "get_attr":
            folded[node.name] = getattr(ep.graph_module, node.target)
            names[node.name] = ir_name[node.name]

    used = {a for op in ops for a in op.args if isinstance(a, str)} | set(outputs)
    buffers = [b for b in buffers if b.kind in ("input", "scalar") or b.name in used]
    values = {k: v for k, v in values.items() if k in used}
    program = TorchProgram(tuple(buffers), tuple(ops), tuple(outputs))
    return Captured(program, values, tuple(input_names), ep.call_spec.out_spec)


class _CSafeNames(dict):
    """fx node name -> Torch-IR name: the same, unless CUDA C++ rejects it as an identifier
    (`exp`, `int`, `max`: every tensor becomes a kernel parameter or names a kernel) or a
    generated local may take it (`tid`, `acc0`), then a free `name_N`."""

    def __init__(self, fx_names):
        super().__init__()
        self.taken = set(fx_names)

    def __missing__(self, name: str) -> str:
        safe = name if tensor_name_ok(name) else c_safe(name, self.taken)
        self.taken.add(safe)
        self[name] = safe
        return safe


def _aten_key(target) -> str:
    name = getattr(target, "_name", None) or str(target)
    if name.startswith("aten::"):
        name = name[len("aten::"):]
        return name if "." in name else name + ".default"
    return str(target)


def _module_path(node) -> str:
    """`, in model.layers.3.mlp (LlamaMLP)`: the innermost module the node was traced in (fx keeps the
    stack in node.meta["nn_module_stack"]), or "" at the top level."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path, kind = list(stack.values())[-1][:2]
    path = path.removeprefix("L['self'].").removeprefix("L__self__.")
    kind = getattr(kind, "__name__", str(kind)).rsplit(".", 1)[-1].strip("'>")
    return f", in {path} ({kind})" if path and path != "L['self']" else ""


# getitem on a multi-output op: the Torch-IR op it becomes, under a key of its own.
_PIECE_KEYS = {f"piece.{op}": (op, lambda a, k: (tuple(a), tuple(k.items())))
               for op in ("slice", "select", "amax", "amin", "argmax", "argmin", "topk", "sort", "var", "std",
                          "mean")}


def _piece(node, pending, names):
    """getitem(split(x), i) -> ("piece.slice", a stand-in node holding the slice's operands)."""
    src, i = node.args
    if src.name not in pending:
        raise UnsupportedOpError(f"getitem of {src.name} (node {node.name}): deplokit reads pieces of "
                                 f"{', '.join(sorted(MULTI_OUTPUT_OPS))} only")
    key, multi = pending[src.name]
    args = _map_args(multi.args, names)
    kwargs = {k: _map_args(v, names) for k, v in multi.kwargs.items()}
    op, targs, attrs = MULTI_OUTPUT_OPS[key](args, kwargs, list(multi.meta["val"]), i)
    return f"piece.{op}", _Stand(node.name, targs, dict(attrs), node.meta, multi.all_input_nodes)


@dataclass
class _Stand:
    """What the op loop reads of an fx node, for a piece that has no node of its own."""
    name: str
    args: tuple
    kwargs: dict
    meta: dict
    all_input_nodes: list


def _functional(key: str, node):
    """An in-place op (add_, clamp_, mul_, masked_fill_...) as its functional twin; the
    tensor it updates is returned so later reads of it see the new value. Updating a view
    would change the tensor it views too, which the functional form cannot say: refused."""
    packet, _, overload = key.partition(".")
    functional = f"{packet[:-1]}.{overload}"
    if not packet.endswith("_") or packet.startswith("_") or functional not in ATEN_OPS:
        return key, None
    target = node.args[0]
    producer = _aten_key(target.target) if target.op == "call_function" else None
    if target.target is operator.getitem:     # a piece of a multi-output op: a view unless fresh
        source = target.args[0]
        producer = _aten_key(source.target) if source.op == "call_function" else None
        if producer in FRESH_PIECES:
            return functional, target
    if producer in VIEW_OPS or target.target is operator.getitem:
        raise UnsupportedOpError(f"in-place aten.{key} (node {node.name}{_module_path(node)}) updates a view "
                                 f"({target.name}, made by aten.{producer}); deplokit supports in-place ops "
                                 "on whole tensors only")
    return functional, target


def _check_overwritten(node, key: str) -> None:
    """The first node (in graph order) that uses `node` must be a copy_ into all of it: any
    other read would see undefined values, which no backend could reproduce."""
    user = node.next
    while user.op != "output" and node not in user.all_input_nodes:
        user = user.next
    # copy_ overwrites all of it; index_put_ is MoE's scatter of a permutation (docs/moe.md),
    # which that rule answers for
    whole_copy = (user.op == "call_function" and _aten_key(user.target) in ("copy_.default", "index_put_.default")
                  and user.args[0] is node)
    if not whole_copy and (user.op != "output" or node in user.all_input_nodes):
        first = "the output" if user.op == "output" else f"aten.{_aten_key(user.target)} (node {user.name})"
        raise UnsupportedOpError(
            f"aten.{key} (node {node.name}{_module_path(node)}) is read by {first} before a copy_ fills it "
            "whole: its values are undefined there; deplokit supports empty_like only when a copy_ "
            "overwrites all of it first")


def _is_random(key: str) -> bool:
    return key.split(".")[0] in {
        "rand",
        "randn",
        "randint",
        "rand_like",
        "randn_like",
        "bernoulli",
        "normal",
        "uniform",
    }


def _map_args(a, names):
    if isinstance(a, torch.fx.Node):
        return names[a.name]
    if isinstance(a, (list, tuple)):
        return type(a)(_map_args(x, names) for x in a)
    if isinstance(a, torch.dtype) or isinstance(a, (torch.device, torch.layout, torch.memory_format)):
        return str(a).replace("torch.", "")
    return a


def _evaluate(node, folded, shape_only: bool = False):
    # A model whose weights sit on the meta device traces its shape-only tables (aranges,
    # rotary tables, masks) on meta too; they are computed here for real, on the CPU.
    # A shape-only op (ones_like, new_zeros...) reads only its input's shape and dtype:
    # zeros of that type stand in for a value that exists only at run time.
    def sub(a):
        if isinstance(a, torch.fx.Node):
            if shape_only and a.name not in folded:
                v = a.meta["val"]
                return torch.zeros(tuple(v.shape), dtype=v.dtype)
            return folded[a.name]
        if isinstance(a, (list, tuple)):
            return type(a)(sub(x) for x in a)
        if isinstance(a, torch.device) and a.type == "meta":
            return torch.device("cpu")
        return a
    with torch.no_grad():
        return node.target(*sub(node.args), **{k: sub(v) for k, v in node.kwargs.items()})


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    return to_numpy(t)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor's values as numpy: a half tensor as float32 (exact; numpy has no bfloat16),
    which is how every executor holds it (runtime/rounding.py)."""
    t = t.detach().cpu().contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.float()
    return t.numpy().copy()
