"""Random programs for the differential fuzzer: chains of covered ops on odd shapes.

A program is `-c` text (deplokit.frontend.expression): factory calls are its inputs, the
last line its output, so every failure replays from one command line. The ops come from
the templates (templates.py) whose ops the decompose registry covers; the knobs from the
passes of the pipeline.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from ..pipeline import PIPELINE
from .limits import MAX_NUMEL, ODD, numel

LONG_ROWS = (12289, 49999, 65537)   # past a block's static shared memory; the last two past 227 KiB
MAX_LONG = 140_000          # elements of a value of a few long rows
TARGETS = ("sm_80", "sm_90", "sm_120")
# Few rows over a long K of two axes (a (rows, A, B) or (b, A, s, B) value that
# reshaped_k_matmul flattens): 003's high split counts with leftover chunks (issue 29).
SKINNY_ROWS = (1, 2, 3, 6)
K_AXES = ((72, 32), (24, 96), (129, 31), (33, 127), (96, 24))


@dataclass
class Case:
    seed: int
    index: int
    text: str                                   # -c program text, one statement per line
    ops: tuple[str, ...]                        # template names, in order
    target: str = "sm_90"
    config: dict = field(default_factory=dict)
    dtype: str = "float32"                      # float32 | bfloat16 | float16 | mixed

    def one_line(self) -> str:
        return "; ".join(self.text.splitlines())


def _shape(rng) -> tuple[tuple[int, ...], str | None]:
    """A start shape, and the template its first step prefers (None: any)."""
    while True:
        lead = None
        rank = rng.choice((1, 2, 2, 3, 3))
        shape = [rng.choice(ODD) for _ in range(rank)]
        if rng.random() < 0.15:
            shape = [rng.choice((1, 2))] * (rank - 1) + [rng.choice(LONG_ROWS)]
        elif rng.random() < 0.08:
            (a, b), rows = rng.choice(K_AXES), rng.choice(SKINNY_ROWS)
            shape = [rows, a, b] if rng.random() < 0.5 else [rows if rows < 3 else 2, a, 3, b]
            lead = "reshaped_k_matmul"
        elif rng.random() < 0.06:      # heads of queries at a flash kernel's head dims: attention written out
            shape = [rng.choice((1, 2, 4)), rng.choice((1, 3, 33, 64, 129)), rng.choice((8, 16, 32, 64))]
            lead = "attention"
        if numel(shape) <= (MAX_LONG if shape[-1] in LONG_ROWS else MAX_NUMEL):
            return tuple(shape), lead


def random_knobs(rng, pass_knobs) -> dict:
    """A few knobs (pass label, knob) -> a value from its declared domain."""
    config = {}
    for key, domain in pass_knobs:
        if rng.random() < 0.25:
            config[key] = rng.choice(list(domain))
    return config


def declared_knobs() -> tuple[tuple[str, tuple], ...]:
    """Every knob the pipeline's passes declare (the autotuner's space and more)."""
    return tuple((f"{p.name}.{k.name}", tuple(k.domain)) for p in PIPELINE for k in p.knobs)


DTYPES = ("float32", "bfloat16", "float16", "mixed")
HALF_TARGETS = ("sm_80", "sm_90")   # mma.sync and wgmma: the tensor-core paths


def to_dtype(text: str, dtype: str, rng) -> str:
    """`text` with its torch.randn inputs cast to `dtype` (mixed: every input but the first,
    the activation, in a half format; the activation stays float32). Integer factories stay."""
    if dtype == "float32":
        return text
    half = rng.choice(("bfloat16", "float16")) if dtype == "mixed" else dtype
    out, seen = [], 0
    for line in text.splitlines():
        if re.match(r"x\d+ = torch\.randn\(.*\)$", line):
            if dtype != "mixed" or seen:
                line = line[:-1].rstrip(",") + f", dtype=torch.{half})"
            seen += 1
        out.append(line)
    return "\n".join(out)


def generate(seed: int, index: int, templates, knobs, dtype: str = "float32") -> Case:
    """Case `index` of run `seed`: the same (seed, index) always gives the same case; a half
    `dtype` casts the float32 case's inputs and picks a tensor-core target from its own rng
    (the float32 stream is unchanged)."""
    case = _generate(seed, index, templates, knobs)
    if dtype == "float32":
        return case
    rng = random.Random(f"{dtype}:{seed}:{index}")
    return Case(seed, index, to_dtype(case.text, dtype, rng), case.ops, rng.choice(HALF_TARGETS),
                case.config, dtype)


def _generate(seed: int, index: int, templates, knobs) -> Case:
    rng = random.Random(seed * 1_000_003 + index)
    lines, pending = [], []

    def new_input(shape, factory=None):
        """An input for the op being made; its line lands only if the op is used."""
        name = f"x{sum(1 for ln in lines + pending if ln.startswith('x'))}"
        dims = ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") if shape else "()"
        pending.append(f"{name} = {factory or f'torch.randn({dims})'}")
        return name

    shape, lead = _shape(rng)
    first = [t for t in templates if t.name == lead]
    current = new_input(shape)
    lines += pending
    used, values = [], [(current, shape)]
    steps = rng.randint(1, 7)
    tries = 0
    while len(used) < steps and tries < 40:
        tries += 1
        t = first[0] if first and not used and rng.random() < 0.8 else rng.choice(templates)
        pending.clear()
        made = t.make(rng, shape, new_input)
        if made is None or numel(made[1]) > max(MAX_NUMEL, numel(shape)):
            continue
        expr, out = made
        lines += pending
        value = f"v{len(used)}"
        lines.append(f"{value} = {expr.replace('{x}', current)}")
        current, shape = value, out
        used.append(t.name)
        same = [v for v, sh in values[:-1] if sh == out]
        if same and rng.random() < 0.25:          # a value read twice, far apart
            lines[-1] += f" + {rng.choice(same)}"
            used.append("join")
        values.append((current, shape))
    others = [v for v, _ in values[1:-1]]
    if others and rng.random() < 0.2:           # a second output
        current = f"{current}, {rng.choice(others)}"
    lines.append(current)
    target = rng.choice(TARGETS)
    return Case(seed, index, "\n".join(lines), tuple(used), target, random_knobs(rng, knobs))
