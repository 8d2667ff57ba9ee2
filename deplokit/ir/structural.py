"""Structural identity of a Loop-IR kernel: the same loop nest over tensors of the same types,
whatever the tensors and the kernel are called.

Layer 3's `merged_rms_norm` reads `p_layers_3_input_layernorm_weight`; layer 4's reads
`p_layers_4_...`; their signatures are equal, so the pair compiles (and is tuned) once. The
signature is the kernel's canonical text with its tensors renamed t0, t1, ... in order of first
appearance, each followed by its type; the hash is a short sha256 of it, stable across
processes (Python's hash() of a str is not).
"""
from __future__ import annotations

import hashlib
import re

from .loop_ir import Kernel


def tensor_order(kernel: Kernel) -> tuple[str, ...]:
    """The kernel's tensors in the order the canonical renaming numbers them: inputs in order
    of first read, then outputs, then the tensors it keeps on chip (its locals)."""
    names = list(kernel.inputs())
    names += [o for o in kernel.outputs if o not in names]
    names += [b.name for b in kernel.locals if b.name not in names]
    return tuple(names)


def kernel_signature(kernel: Kernel, types: dict) -> str:
    """Canonical text of `kernel` with tensor names replaced by t0, t1, ... and the kernel's
    name dropped; `types` maps tensor names to TensorType. A tensor is always written
    `name[index]` (loads, stores, gathers inside an index), so only a name followed by `[`
    is renamed: an output called `relu` leaves the op `relu(...)` alone."""
    order = tensor_order(kernel)
    rename = {name: f"t{i}" for i, name in enumerate(order)}
    body = str(kernel).split("\n", 1)[1] if "\n" in str(kernel) else ""
    if rename:
        pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in sorted(rename, key=len, reverse=True))
                             + r")(?=\[)")
        body = pattern.sub(lambda m: rename[m.group(1)], body)
    header = "; ".join(f"{rename[n]}: {types[n]}" if n in types else rename[n] for n in order)
    outs = ", ".join(rename[o] for o in kernel.outputs)
    return f"{header}\n-> {outs}\n{body}"


def structural_hash(kernel: Kernel, types: dict) -> str:
    """16 hex digits identifying the kernel up to the names of its tensors."""
    return hashlib.sha256(kernel_signature(kernel, types).encode()).hexdigest()[:16]
