"""Planting a defect in a Kernel IR program, for the tests that check the simulator fails it:
`plant(stmts, change)` rewrites every statement, nested bodies included."""
import dataclasses


def plant(stmts, change):
    """The statements with `change` applied to each (nested `body`, `then`, `orelse` too);
    a statement `change` maps to None is dropped."""
    out = []
    for s in stmts:
        s = change(s)
        if s is None:
            continue
        for f in ("body", "then", "orelse"):
            if isinstance(getattr(s, f, None), tuple):
                s = dataclasses.replace(s, **{f: tuple(plant(getattr(s, f), change))})
        out.append(s)
    return out
