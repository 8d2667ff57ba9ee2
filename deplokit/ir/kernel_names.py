"""The names a Kernel-IR kernel declares, and a renaming of them.

Parameters are bound by name (the launch passes the buffer called so) and kernels are
looked up by name, but every other name (registers, loop variables, shared arrays,
mbarriers) is private to its kernel. A generated local may meet a tensor's name (an input
called `tid`, `acc0` or `x_smem`): C rejects the redeclaration, or the local silently
shadows the buffer. `unclash_locals` renames such locals; `name_problems` reports every
name CUDA C++ would reject, for the simulator to refuse what nvcc refuses.
"""
from __future__ import annotations

import dataclasses
import re

from . import kernel_ir as K
from .c_names import c_rejects

# (node class, field) pairs that name a kernel-local; every other str field names a
# parameter (a buffer), an operator or a thread coordinate.
_LOCAL_FIELDS = {
    K.Var: ("name",), K.Declare: ("name",), K.DeclareArray: ("name",), K.Assign: ("name",),
    K.SharedArray: ("name",), K.SharedLoad: ("array",), K.RegLoad: ("array",),
    K.SharedStore: ("array",), K.For: ("var",), K.CpAsync: ("array",),
    K.TmaLoad: ("array", "barrier"), K.TmaTensorLoad: ("array", "barrier"), K.MbarrierInit: ("name",),
    K.MbarrierWait: ("name",), K.MbarrierArrive: ("name",),
}


def _local_fields(node) -> tuple[str, ...]:
    fields = _LOCAL_FIELDS.get(type(node), ())
    if isinstance(node, K.VectorLoad):
        return ("dsts",) + (("source",) if node.space == "shared" else ())
    if isinstance(node, K.VectorStore) and node.space == "shared":
        return ("target",)
    return fields


def _nodes(node):
    yield node
    if isinstance(node, tuple):
        for item in node:
            yield from _nodes(item)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        for f in dataclasses.fields(node):
            yield from _nodes(getattr(node, f.name))


def declared_locals(k: K.KernelFunc) -> list[str]:
    """Every local name of `k`, in first-seen order."""
    out: dict[str, None] = {}
    for n in _nodes(k.body):
        for f in _local_fields(n):
            v = getattr(n, f)
            for name in (v if isinstance(v, tuple) else (v,)):
                out.setdefault(name, None)
    return list(out)


def _rename(node, mapping: dict[str, str]):
    if isinstance(node, tuple):
        return tuple(_rename(item, mapping) for item in node)
    if not dataclasses.is_dataclass(node) or isinstance(node, type):
        return node
    local = _local_fields(node)
    changes = {}
    for f in dataclasses.fields(node):
        v = getattr(node, f.name)
        if f.name in local:
            new = tuple(mapping.get(x, x) for x in v) if isinstance(v, tuple) else mapping.get(v, v)
        else:
            new = _rename(v, mapping)
        if new is not v:
            changes[f.name] = new
    return dataclasses.replace(node, **changes) if changes else node


def unclash_locals(k: K.KernelFunc) -> K.KernelFunc:
    """`k` with every local that C would reject or that meets a parameter's name renamed
    to a free `name_N`; `k` itself when there is none."""
    outer = {p.name for p in k.params} | {t.name for t in k.tensor_maps}
    locals_ = declared_locals(k)
    taken = outer | set(locals_) | {k.name}
    mapping = {}
    for name in locals_:
        if name in outer or c_rejects(name):
            # from a base C accepts (no `__`, no leading `_`), so some `base_N` is free
            base = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", name)).strip("_") or "v"
            base = base if not base[0].isdigit() else f"v_{base}"
            n, cand = 1, f"{base}_1"
            while cand in taken or c_rejects(cand):
                n, cand = n + 1, f"{base}_{n + 1}"
            taken.add(cand)
            mapping[name] = cand
    return dataclasses.replace(k, body=_rename(k.body, mapping)) if mapping else k


def name_problems(k: K.KernelFunc) -> list[str]:
    """What CUDA C++ would reject in `k`'s names (empty when nothing)."""
    problems = []
    why = c_rejects(k.name)
    if why:
        problems.append(f"kernel name {k.name!r} {why}")
    params = set()
    for p in tuple(k.params) + tuple(k.tensor_maps):
        why = c_rejects(p.name)
        if why:
            problems.append(f"parameter {p.name!r} {why}")
        params.add(p.name)
    for name in declared_locals(k):
        why = c_rejects(name)
        if why:
            problems.append(f"local {name!r} {why}")
        elif name in params:
            problems.append(f"local {name!r} is declared with the name of parameter {name!r}")
    return problems
