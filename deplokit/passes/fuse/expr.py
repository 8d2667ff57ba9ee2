"""The expression DAG a kernel is built from before it is scheduled into loops.

Expressions are interned as small integers so that identical loads and computations are
shared (CSE) and deep chains stay cheap to hash."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...ir.index import Affine, free_vars, gathers


@dataclass(frozen=True)
class ELoad:
    tensor: str
    index: tuple[Affine, ...]
    pad: float | None


@dataclass(frozen=True)
class IntConst:
    """An integer constant operand, told apart from an expression id and kept exact (2**60 + 1
    is no float)."""
    value: int


@dataclass(frozen=True)
class EOp:
    op: str
    args: tuple        # ints (expression ids), floats, IntConsts, or Affine index values
    origin: str        # the Tensor-IR node it computes
    dtype: str = "float32"   # its value's (the Tensor-IR node's, bool for a padded map's tests)


@dataclass(frozen=True)
class EAcc:
    instance: int      # which fused reduction's accumulator


@dataclass
class ExprTable:
    exprs: list = field(default_factory=list)
    ids: dict = field(default_factory=dict)
    vars: list = field(default_factory=list)     # loop variables each expression depends on
    accs: list = field(default_factory=list)     # reduction instances each depends on

    def add(self, e, acc_of: int | None = None) -> int:
        found = self.ids.get(e)
        if found is not None:
            return found
        i = len(self.exprs)
        self.exprs.append(e)
        self.ids[e] = i
        if isinstance(e, ELoad):
            vs = set()
            for ix in e.index:
                vs |= free_vars(ix)
            self.vars.append(frozenset(vs))
            self.accs.append(frozenset())
        elif isinstance(e, EOp):
            vs, acs = set(), set()
            for a in e.args:
                if isinstance(a, int):
                    vs |= self.vars[a]
                    acs |= self.accs[a]
                elif isinstance(a, Affine):
                    vs |= free_vars(a)
            self.vars.append(frozenset(vs))
            self.accs.append(frozenset(acs))
        else:
            self.vars.append(frozenset())
            self.accs.append(frozenset({e.instance}))
        return i


def load_tensors(e: ELoad) -> tuple[str, ...]:
    return tuple(g.tensor for ix in e.index for g in gathers(ix)) + (e.tensor,)
