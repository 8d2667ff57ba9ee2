"""Helpers the stage, TMA and ring tests share: corpus programs compiled with TMA forced,
a trace step by name, the Tile-IR stages of a compilation, Kernel-IR nodes of a kind."""
from __future__ import annotations

from programs import corpus

import deplokit
from deplokit.ir.tile_ir import Stage, walk

PROGRAMS = corpus()
TMA_ON = {"011_tma_copy.enable": True}


def build(name, target="sm_90", config=None):
    """A corpus program compiled with TMA forced where 011 would leave a small register
    block on cp.async (its default); `config` overrides."""
    fn, inputs = PROGRAMS[name]
    return deplokit.compile(fn, *inputs, target=target, config={**TMA_ON, **(config or {})})


def step(c, label):
    return next(s for s in c.trace if s.stage == "tile" and s.name == label)


def stages(c):
    return [s for k in c.tile_ir.kernels for s, _ in walk(k.body) if isinstance(s, Stage)]


def nodes(body, kind):
    for s in body:
        if isinstance(s, kind):
            yield s
        for child in ("body", "then", "orelse"):
            yield from nodes(getattr(s, child, ()), kind)
