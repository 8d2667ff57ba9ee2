"""Runtime positions in capture: values of the form pos + offset, with pos a runtime scalar
(a (1,) int64 input) and offset an integer tensor known at capture, followed through the ops
that keep that form, and the in-place writes into module state they index (docs/generation.md)."""
from __future__ import annotations

import torch

from ..errors import UnsupportedOpError
from ..ir.torch_ir import TorchOp
from ..ir.types import Buffer, TensorType

# Ops that commute with adding the position: f(pos + offset) == pos + f(offset) for an
# integer offset (views, copies, adding a constant).
_SHIFT_OPS = {"select.int", "unsqueeze.default", "view.default", "_unsafe_view.default", "reshape.default",
              "expand.default", "slice.Tensor", "alias.default", "clone.default", "contiguous.default",
              "squeeze.dim", "squeeze.default", "detach.default", "lift_fresh_copy.default", "copy_.default",
              "copy.default", "to.dtype", "to.dtype_layout", "_to_copy.default", "add.Tensor", "add_.Tensor",
              "sub.Tensor", "sub_.Tensor"}


class Positions:
    """Values of the form pos + offset (pos a runtime scalar, offset an integer tensor known at
    capture), followed through the ops that keep that form, and what they flow into:
    - index_copy_(buffer, dim, pos + offset + arange(n), src) into module state: the buffer
      becomes a `state` buffer and the op `index_copy(state, pos, src, dim=, offset=)`, an
      in-place write at the runtime position (static KV caches: transformers' StaticCache);
    - with the positions' range known (`limit`: pos in 0 .. limit - 1), a value computed from
      positions and constants only (the rotary cos/sin, a causal mask) is tabulated, one row
      per position, while the table stays under TABLE_ELEMENTS: a constant read at row pos
      (`embedding(table, pos)`), where the kernels would otherwise compute it at run time;
    - any other op: the value is made a tensor, `add(pos, offset)` (a causal mask's bound,
      rotary positions)."""

    def __init__(self, ir_name, folded, buffers, values, ops, names, *, tensor_type, to_numpy, module_path):
        # capture's own tables, shared: names given, values folded, buffers and ops made so far
        self.ir_name, self.folded, self.buffers, self.values, self.ops, self.names = \
            ir_name, folded, buffers, values, ops, names
        self.tensor_type, self.to_numpy, self.module_path = tensor_type, to_numpy, module_path
        self.sym: dict[str, tuple[str, torch.Tensor]] = {}   # fx name -> (scalar's IR name, offset)
        self.states = 0
        self.limit = 0
        self.tab: dict[str, tuple[str, torch.Tensor]] = {}   # fx name -> (scalar, value at each position)
        self.tables: dict[tuple, str] = {}                  # a table's contents -> its const buffer
        self.rows: dict[tuple, str] = {}                    # (contents, shape) -> the row op read by all

    def start(self, fx_name: str, scalar: str) -> None:
        self.sym[fx_name] = (scalar, torch.zeros(1, dtype=torch.int64))

    def track(self, node, key: str) -> bool:
        ins = [a for a in node.all_input_nodes if a.name in self.sym]
        tabbed = [a for a in node.all_input_nodes if a.name in self.tab]
        if not ins and not tabbed:
            return False
        if key in ("index_copy_.default", "index_copy.default") and node.args[2].name in self.sym:
            self._write(node, key)
            return True
        if not tabbed and self._shift(node, key, ins):
            return True
        if not tabbed and self._key_mask(node, key, ins):
            return True
        if self._tabulate(node, key, ins + tabbed):
            return True
        for a in ins + tabbed:
            self.materialise(a)
        return False

    def _tabulate(self, node, key, ins) -> bool:
        val = node.meta.get("val")
        scalars = {(self.sym.get(a.name) or self.tab[a.name])[0] for a in ins}
        if (not self.limit or len(scalars) != 1 or key.split(".")[0].endswith("_") or not isinstance(val, torch.Tensor)
                or val.numel() * self.limit > TABLE_ELEMENTS
                or any(a.name not in self.sym and a.name not in self.tab and a.name not in self.folded
                       for a in node.all_input_nodes)):
            return False

        def at(p):
            def sub(a):
                if isinstance(a, torch.fx.Node):
                    if a.name in self.sym:
                        return self.sym[a.name][1] + p
                    if a.name in self.tab:
                        return self.tab[a.name][1][p]
                    return _on_cpu(self.folded[a.name]).clone()
                if isinstance(a, (list, tuple)):
                    return type(a)(sub(x) for x in a)
                if isinstance(a, torch.device) and a.type == "meta":
                    return torch.device("cpu")
                return a
            return sub
        with torch.no_grad():
            rows = []
            for p in range(self.limit):
                sub = at(p)
                rows.append(node.target(*sub(node.args), **{k: sub(v) for k, v in node.kwargs.items()}))
        self.tab[node.name] = (scalars.pop(), torch.stack(rows))
        return True

    def _shift(self, node, key, ins) -> bool:
        val = node.meta.get("val")
        if key not in _SHIFT_OPS or not isinstance(val, torch.Tensor) or val.dtype != torch.int64:
            return False
        if key.startswith(("add", "sub")):
            alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else 1)
            if len(ins) != 1 or alpha != 1 or (key.startswith("sub") and node.args[0] is not ins[0]):
                return False
        if key.startswith("copy") and node.args[1] is not ins[0]:
            return False
        scalars = {self.sym[a.name][0] for a in ins}
        if len(scalars) != 1:
            return False
        def sub(a):
            if isinstance(a, torch.fx.Node):
                if a.name in self.sym:
                    return self.sym[a.name][1].clone()
                if a.name in self.folded:
                    return _on_cpu(self.folded[a.name]).clone()
                raise KeyError(a.name)
            if isinstance(a, (list, tuple)):
                return type(a)(sub(x) for x in a)
            if isinstance(a, torch.device) and a.type == "meta":
                return torch.device("cpu")
            return a
        try:
            with torch.no_grad():
                out = node.target(*sub(node.args), **{k: sub(v) for k, v in node.kwargs.items()})
        except KeyError:      # another operand is a run-time tensor
            return False
        entry = (scalars.pop(), out.to(torch.int64).clone())
        self.sym[node.name] = entry
        if key.split(".")[0].endswith("_"):      # in place: later reads of the target see the new value
            self.sym[node.args[0].name] = entry
            self.folded.pop(node.args[0].name, None)
        return True

    def _key_mask(self, node, key, ins) -> bool:
        """`arange(K) <= pos + c` (le, lt, ge, gt of a constant that is an arange along its last
        axis and a position of one offset c): the op `key_mask(pos, offset=c')`, true where the
        last index k <= pos + c'. Its decomposition compares the index itself, so that passes
        can read the bound (flash-decoding stops its key loop there: passes/flash/attention_split)."""
        flips = {"le": "le", "lt": "lt", "ge": "le", "gt": "lt"}
        op = key.split(".")[0]
        val = node.meta.get("val")
        if op not in flips or len(ins) != 1 or len(node.args) != 2 or not isinstance(val, torch.Tensor):
            return False
        pos_at = 1 if op in ("le", "lt") else 0
        p, a = node.args[pos_at], node.args[1 - pos_at]
        if p is not ins[0] or not isinstance(a, torch.fx.Node) or a.name not in self.folded:
            return False
        keys = _on_cpu(self.folded[a.name])
        scalar, offset = self.sym[p.name]
        if keys.dtype != torch.int64 or keys.dim() == 0 or keys.numel() != keys.shape[-1] \
                or not torch.equal(keys.reshape(-1), torch.arange(keys.shape[-1])) \
                or offset.numel() != 1 or tuple(val.shape[:-1]) != (1,) * (val.dim() - 1) \
                or val.shape[-1] != keys.shape[-1] or (val.dim() < offset.dim()):
            return False
        c = int(offset.reshape(-1)[0]) - (1 if flips[op] == "lt" else 0)
        out = self.ir_name[node.name]
        self.ops.append(TorchOp(out, "key_mask", (scalar,), (("offset", c),),
                                TensorType(tuple(val.shape), "bool")))
        self.names[node.name] = out
        return True

    def _write(self, node, key: str) -> None:
        dst, dim, idx, src = node.args[:4]
        scalar, offset = self.sym[idx.name]
        offset = offset.reshape(-1)
        where = f"index_copy (node {node.name}{self.module_path(node)})"
        if not torch.equal(offset, offset[0] + torch.arange(offset.numel())):
            raise UnsupportedOpError(f"{where} writes at positions {scalar} + {offset.tolist()}; deplokit writes "
                                     "a run of consecutive positions from a runtime scalar")
        if dst.name not in self.folded or src.name in self.sym or src.name in self.folded:
            raise UnsupportedOpError(f"{where} writes at a runtime position into {dst.name}, which is not module "
                                     "state (a buffer or lifted tensor), or from a value known at capture; "
                                     "deplokit writes computed values into module state only")
        state = self.ir_name[f"kv_cache{self.states}"]
        self.states += 1
        ttype = self.tensor_type(self.folded[dst.name], f"state {dst.name}", empty_ok=False)
        self.buffers.append(Buffer(state, ttype, "state"))
        self.values[state] = self.to_numpy(_on_cpu(self.folded.pop(dst.name)))
        out = self.ir_name[f"{state}_written"]     # (`index_copy_` would end a C name in _)
        self.ops.append(TorchOp(out, "index_copy", (state, scalar, self.names[src.name]),
                                (("dim", dim % ttype.rank), ("offset", int(offset[0]))), ttype))
        self.names[node.name] = out
        if key.startswith("index_copy_"):
            self.names[dst.name] = out

    def materialise(self, a) -> None:
        """The tensor pos + offset, or a table's row pos, for a value another op reads (once)."""
        if a.name in self.tab and a.name not in self.names:
            self._row(a)
            return
        if a.name not in self.sym or a.name in self.names:
            return
        scalar, offset = self.sym[a.name]
        if offset.dim() == 0:
            raise UnsupportedOpError(f"{a.name} is a 0-d value computed from runtime scalar {scalar}; deplokit "
                                     "reads a runtime scalar through tensors of at least one dimension")
        if tuple(offset.shape) == (1,) and int(offset[0]) == 0:
            self.names[a.name] = scalar
            return
        out = self.ir_name[a.name]
        const = self.ir_name[f"{a.name}_offset"]
        self.buffers.append(Buffer(const, self.tensor_type(offset, f"offset {a.name}"), "const"))
        self.values[const] = self.to_numpy(offset)
        self.ops.append(TorchOp(out, "add", (scalar, const), (), TensorType(tuple(offset.shape), "int64")))
        self.names[a.name] = out


    def _row(self, a) -> None:
        """embedding(table, pos) viewed as the value's shape: the table is (limit, elements)."""
        scalar, table = self.tab[a.name]
        shape, dtype = tuple(table.shape[1:]), table.dtype
        flat = table.reshape(self.limit, -1).contiguous()
        key = (str(dtype), tuple(flat.shape), flat.view(torch.uint8).numpy().tobytes())   # bf16: no numpy dtype
        if key not in self.tables:
            name = self.ir_name[f"{a.name}_table"]
            self.buffers.append(Buffer(name, self.tensor_type(flat, f"table {a.name}"), "const"))
            self.values[name] = self.to_numpy(flat)
            self.tables[key] = name
        if (key, shape) in self.rows:      # every layer reads the one row (the rotary cos and sin)
            self.names[a.name] = self.rows[key, shape]
            return
        ttype = self.tensor_type(table[0], f"table {a.name}")
        row = self.ir_name[f"{a.name}_row"]
        self.ops.append(TorchOp(row, "embedding", (self.tables[key], scalar), (),
                                TensorType((1, flat.shape[1]), ttype.dtype)))
        out = self.ir_name[a.name]
        self.ops.append(TorchOp(out, "view", (row,), (("shape", shape),), ttype))
        self.names[a.name] = self.rows[key, shape] = out


# The largest table of a position-only value (elements over every position): 2**20 holds the
# rotary cos/sin of a decode step (positions x head_dim) for caches of thousands of positions.
TABLE_ELEMENTS = 2 ** 20


def _on_cpu(t: torch.Tensor) -> torch.Tensor:
    """t, or for a tensor on the meta device (a model built without weights: compile only)
    zeros of its shape: module state there is a static cache or counter that starts at zero
    and is overwritten before it is read."""
    return torch.zeros(t.shape, dtype=t.dtype) if t.is_meta else t
