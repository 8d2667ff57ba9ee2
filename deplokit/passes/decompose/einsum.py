"""einsum: each operand's axes named by letters; a pair of operands becomes a batched
matmul (batch letters, lhs-only letters as M, summed letters as K, rhs-only as N), so the
contractions of attention ('bhqd,bhkd->bhqk') and linear layers ('bsd,od->bso') schedule as
matmuls do. Letters only one operand has and the output lacks are summed first; more
operands are contracted left to right."""
from __future__ import annotations

from ...errors import UnsupportedOpError
from .builder import Builder
from .matmul import contract
from .registry import rule


@rule("einsum")
def decompose_einsum(op, b: Builder) -> str:
    operands = op.args
    inputs, output = _parse(op.attr("equation"), [len(b.shape(x)) for x in operands], op.name)
    sizes: dict[str, int] = {}
    for letters, x in zip(inputs, operands):
        for c, e in zip(letters, b.shape(x)):
            if sizes.get(c, e) != e and 1 not in (sizes.get(c), e):
                raise UnsupportedOpError(f"einsum (node {op.name}): axis {c!r} has sizes {sizes[c]} and {e}")
            sizes[c] = max(sizes.get(c, 1), e)
    acc, acc_letters = operands[0], inputs[0]
    for k in range(1, len(operands) + 1):
        later = set(output).union(*inputs[k + 1:]) if k < len(operands) else set(output)
        if k == len(operands):
            acc, acc_letters = _sum_unneeded(b, acc, acc_letters, later)
            break
        rhs, rhs_letters = operands[k], inputs[k]
        acc, acc_letters = _sum_unneeded(b, acc, acc_letters, later | set(rhs_letters))
        rhs, rhs_letters = _sum_unneeded(b, rhs, rhs_letters, later | set(acc_letters))
        acc, acc_letters = _pair(b, acc, acc_letters, rhs, rhs_letters, later, sizes)
    return b.permute(acc, tuple(acc_letters.index(c) for c in output), "einsum")


def _parse(equation: str, ranks: list[int], where: str) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(ranks):
        raise UnsupportedOpError(f"einsum (node {where}): {equation!r} names {len(inputs)} operands, got {len(ranks)}")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq]
    n_ell = max((r - len(s.replace("...", "")) for s, r in zip(inputs, ranks) if "..." in s), default=0)
    ell = "".join(free[:n_ell])
    inputs = [s.replace("...", ell[n_ell - (r - len(s.replace("...", ""))):]) for s, r in zip(inputs, ranks)]
    if not arrow:   # implicit output: the letters seen once, in alphabetical order
        seen = "".join(inputs)
        out = ell + "".join(sorted(c for c in set(seen) if seen.count(c) == 1 and c not in ell))
    out = out.replace("...", ell)
    for s, r in zip(inputs, ranks):
        if len(s) != r or len(set(s)) != len(s):
            raise UnsupportedOpError(f"einsum (node {where}): {equation!r} does not fit an operand of rank {r} "
                                     "(repeated letters, diagonals, are not supported)")
    return inputs, out


def _sum_unneeded(b: Builder, x: str, letters: str, needed: set) -> tuple[str, str]:
    axes = tuple(p for p, c in enumerate(letters) if c not in needed)
    if not axes:
        return x, letters
    return b.reduce("sum", x, axes, keepdim=False, hint="esum"), "".join(c for c in letters if c in needed)


def _pair(b: Builder, lhs: str, ll: str, rhs: str, rl: str, later: set, sizes: dict) -> tuple[str, str]:
    """lhs * rhs summed over the letters both have and nothing later needs: a batched matmul."""
    batch = [c for c in ll if c in rl and c in later]
    summed = [c for c in ll if c in rl and c not in later]
    m_letters = [c for c in ll if c not in rl]
    n_letters = [c for c in rl if c not in ll]
    lhs = _arrange(b, lhs, ll, batch, m_letters, summed, sizes)
    rhs = _arrange(b, rhs, rl, batch, summed, n_letters, sizes)
    out = contract(b, lhs, rhs)
    shape = tuple(b.shape(out)[:len(batch)]) + tuple(sizes[c] for c in m_letters + n_letters)
    return b.reshape(out, shape, "einsum_mn"), "".join(batch + m_letters + n_letters)


def _arrange(b: Builder, x: str, letters: str, batch, rows, cols, sizes) -> str:
    """x permuted to (batch..., rows, cols) and the row and column letter groups merged."""
    order = [letters.index(c) for c in list(batch) + list(rows) + list(cols)]
    x = b.permute(x, tuple(order), "einsum_in")
    shape = b.shape(x)
    nr = 1
    for c in rows:
        nr *= shape[len(batch) + list(rows).index(c)]
    nc = 1
    for p in range(len(batch) + len(rows), len(shape)):
        nc *= shape[p]
    return b.reshape(x, tuple(shape[:len(batch)]) + (nr, nc), "einsum_mat")
