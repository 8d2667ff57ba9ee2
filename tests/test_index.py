"""deplokit/ir/index.py: affine index arithmetic, floordiv/mod simplification under
variable ranges, substitution, and evaluation, checked against numpy on whole grids."""
from __future__ import annotations

import random

import numpy as np
import pytest

from deplokit.ir.index import (
    Affine,
    FloorDiv,
    Gather,
    Mod,
    Var,
    as_affine,
    bounds,
    const,
    evaluate,
    floordiv,
    free_vars,
    gathers,
    mod,
    rename,
    substitute,
    var,
)
from deplokit.ir.types import TensorType
from deplokit.passes.decompose.builder import Builder


def grid(ranges: dict[str, int]) -> dict[str, np.ndarray]:
    names = list(ranges)
    mesh = np.meshgrid(*[np.arange(ranges[n]) for n in names], indexing="ij")
    return dict(zip(names, mesh))


def value(e: Affine, env: dict, tensors: dict = {}) -> np.ndarray:
    shape = np.broadcast_shapes(*(np.shape(v) for v in env.values())) if env else ()
    return np.broadcast_to(evaluate(e, env, tensors), shape)


# -- construction ---------------------------------------------------------------------------------
def test_affine_arithmetic_merges_and_cancels_terms():
    i, j = var("i"), var("j")
    e = i * 3 + j + 2 - i * 3
    assert e == j + 2
    assert e.atoms() == (Var("j"),) and e.const == 2
    assert (i - i).is_const and (i - i) == const(0)
    assert -(i * 2 - 1) == i * -2 + 1
    assert 0 * i == const(0) and as_affine(5) == const(5) and as_affine(Var("i")) == i
    assert (i * 2) * 3 == i * 6


def test_text():
    i, j = var("i"), var("j")
    assert str(i * 35 + j) == "i * 35 + j"
    assert str(i - j * 2 - 3) == "i - j * 2 - 3"
    assert str(floordiv(i + j, 4)) == "(i + j) // 4"
    assert str(mod(i * 3 + j, 4) + i) == "((i * 3 + j) % 4) + i"
    assert str(const(0)) == "0" and str(-i) == "-i"


def test_bounds():
    r = {"i": 6, "j": 35}
    assert bounds(var("i") * 35 + var("j"), r) == (0, 209)
    assert bounds(var("i") * -2 + 3, r) == (-7, 3)
    assert bounds(var("k"), r) is None
    assert bounds(as_affine(FloorDiv(var("j"), 7)), r) == (0, 4)
    assert bounds(as_affine(Mod(var("j"), 7)), r) == (0, 6)
    assert bounds(as_affine(Mod(var("i"), 7)), r) == (0, 5)        # i < 7: the mod is i itself
    assert bounds(as_affine(Gather("ids", (var("i"),))), r) is None


# -- floordiv / mod simplification ---------------------------------------------------------------
def test_floordiv_mod_of_a_flattened_index_simplify_under_ranges():
    i, j = var("i"), var("j")
    r = {"i": 6, "j": 35}
    flat = i * 35 + j
    assert floordiv(flat, 35, r) == i
    assert mod(flat, 35, r) == j
    # Without ranges nothing is known about j: the division stays.
    assert floordiv(flat, 35) == i + as_affine(FloorDiv(j, 35))
    assert mod(flat, 35) == as_affine(Mod(j, 35))


def test_floordiv_mod_constants_and_trivial_divisors():
    i = var("i")
    assert floordiv(const(17), 5) == const(3) and mod(const(17), 5) == const(2)
    assert floordiv(const(-1), 4) == const(-1) and mod(const(-1), 4) == const(3)   # python floor semantics
    assert floordiv(i * 3 + 1, 1) == i * 3 + 1 and mod(i * 3 + 1, 1) == const(0)
    assert floordiv(i * 8 + 4, 4, {}) == i * 2 + 1
    assert mod(i * 8 + 4, 4, {}) == const(0)


def test_nested_floordiv_folds_divisors():
    i = var("i")
    assert floordiv(floordiv(i, 3), 4) == floordiv(i, 12)
    env = grid({"i": 100})
    np.testing.assert_array_equal(value(floordiv(floordiv(i, 3), 4), env), env["i"] // 12)


def test_mod_within_range_is_dropped():
    j = var("j")
    assert mod(j, 7, {"j": 7}) == j
    assert mod(j, 7, {"j": 8}) == as_affine(Mod(j, 7))
    assert floordiv(j, 7, {"j": 7}) == const(0)


def _random_affine(rng, names, lo=-12, hi=12):
    e = const(rng.randint(-10, 10))
    for n in names:
        e = e + var(n) * rng.randint(lo, hi)
    return e


@pytest.mark.parametrize("seed", range(4))
def test_floordiv_and_mod_match_numpy(seed):
    """Random affine forms (negative coefficients and constants included), nested divisions
    and mods, with and without ranges: every simplification keeps the value."""
    rng = random.Random(seed)
    for _ in range(300):
        names = "ijk"[:rng.randint(1, 3)]
        ranges = {n: rng.randint(1, 9) for n in names}
        e = _random_affine(rng, names)
        if rng.random() < 0.3:
            e = floordiv(e, rng.randint(1, 5), ranges if rng.random() < 0.5 else {}) * rng.randint(-3, 3) + var("i")
        elif rng.random() < 0.3:
            e = mod(e, rng.randint(1, 5), ranges if rng.random() < 0.5 else {}) * rng.randint(-3, 3) + var("i")
        env = grid(ranges)
        base = value(e, env)
        lo, hi = bounds(e, ranges)
        assert lo <= base.min() and base.max() <= hi, (e, ranges)
        d = rng.randint(1, 8)
        for r in (ranges, {}):
            np.testing.assert_array_equal(value(floordiv(e, d, r), env), base // d, err_msg=f"({e}) // {d} {r}")
            np.testing.assert_array_equal(value(mod(e, d, r), env), base % d, err_msg=f"({e}) % {d} {r}")


# -- substitution ------------------------------------------------------------------------------------
def test_substitute_resimplifies_divisions():
    i, j, p, q = var("i"), var("j"), var("p"), var("q")
    # x[i // 35, i % 35] read at i = p * 35 + q (p < 6, q < 35) is x[p, q].
    e0, e1 = floordiv(i, 35), mod(i, 35)
    m = {"i": p * 35 + q}
    r = {"p": 6, "q": 35}
    assert substitute(e0, m, r) == p and substitute(e1, m, r) == q
    # Unmapped variables stay; constants and coefficients carry through.
    assert substitute(i * 2 + j + 1, {"i": p + 3}) == p * 2 + j + 7
    assert rename(i * 2 + j, {"i": "a0", "j": "a1"}) == var("a0") * 2 + var("a1")


def _random_expr(rng, names, ranges, depth=0):
    e = _random_affine(rng, names, -7, 7)
    roll = rng.random()
    if depth < 2 and roll < 0.3:
        e = e + floordiv(_random_expr(rng, names, ranges, depth + 1), rng.randint(1, 6), ranges) * rng.randint(-2, 3)
    elif depth < 2 and roll < 0.5:
        e = e + mod(_random_expr(rng, names, ranges, depth + 1), rng.randint(1, 6), ranges) * rng.randint(-2, 3)
    return e


@pytest.mark.parametrize("seed", range(4))
def test_substitute_matches_evaluating_the_mapping(seed):
    rng = random.Random(seed)
    for _ in range(300):
        new = {n: rng.randint(1, 8) for n in "pqr"}
        e = _random_expr(rng, "ij", {})
        mapping = {"i": _random_expr(rng, "pqr", new), "j": _random_expr(rng, "pq", new)}
        ranges = dict(new)
        if rng.random() < 0.3:           # j left free
            del mapping["j"]
            ranges["j"] = rng.randint(1, 5)
        env = grid(ranges)
        old_env = {"i": value(mapping["i"], env), "j": value(mapping["j"], env) if "j" in mapping else env["j"]}
        want = value(e, old_env)
        got = value(substitute(e, mapping, ranges), env)
        np.testing.assert_array_equal(got, want, err_msg=f"{e} with {mapping}")


# -- gathers ------------------------------------------------------------------------------------------
def test_gather_evaluates_through_an_integer_tensor():
    ids = np.array([[3, 0, 2], [1, 1, 4]], dtype=np.int32)
    g = as_affine(Gather("ids", (var("i"), var("j"))))
    e = g * 5 + var("k")
    env = grid({"i": 2, "j": 3, "k": 5})
    got = value(e, env, {"ids": ids})
    np.testing.assert_array_equal(got, ids[:, :, None].astype(np.int64) * 5 + np.arange(5))
    assert got.dtype == np.int64
    assert free_vars(e) == {"i", "j", "k"}
    assert gathers(e) == (Gather("ids", (var("i"), var("j"))),)
    # Substitution goes inside the gather's own index.
    s = substitute(g, {"i": const(1), "j": var("p") + 1})
    assert s == as_affine(Gather("ids", (const(1), var("p") + 1)))
    np.testing.assert_array_equal(value(s, grid({"p": 2}), {"ids": ids}), ids[1, 1:3])


def test_nested_gathers_innermost_first():
    inner = Gather("a", (var("i"),))
    outer = Gather("b", (as_affine(inner) + 1,))
    assert gathers(as_affine(outer)) == (inner, outer)
    a, b = np.array([2, 0, 1]), np.array([10, 20, 30, 40])
    np.testing.assert_array_equal(value(as_affine(outer), grid({"i": 3}), {"a": a, "b": b}), b[a + 1])


# -- reshape round trips through the builder's index maps ------------------------------------------------
def _compose(maps, out_shape):
    """The source index of the last map's output, through every map (as a fused kernel reads it)."""
    ranges = {chr(ord("i") + q): e for q, e in enumerate(out_shape)}
    index = maps[-1].index
    for m in reversed(maps[:-1]):
        mapping = {chr(ord("i") + k): ix for k, ix in enumerate(index)}
        index = tuple(substitute(e, mapping, ranges) for e in m.index)
    return index


def _reshape_chain(src, *shapes):
    b = Builder({"x": TensorType(src)})
    cur = "x"
    for s in shapes:
        cur = b.reshape(cur, s, "v")
    return b.nodes


@pytest.mark.parametrize("chain,expected", [
    (((6, 35), (210,), (6, 35)), ("i", "j")),
    (((3, 1, 37), (111,), (3, 1, 37)), ("i", "0", "k")),
    (((2, 3, 4), (6, 4), (2, 12), (2, 3, 4)), ("i", "j", "k")),
    (((2, 3, 4), (24,), (2, 3, 4)), ("i", "j", "k")),
    (((5, 7), (35,), (1, 35), (5, 7)), ("i", "j")),
], ids=str)
def test_reshape_round_trip_simplifies_to_plain_variables(chain, expected):
    src, *shapes = chain
    nodes = _reshape_chain(src, *shapes)
    index = _compose(nodes, shapes[-1])
    assert tuple(str(e) for e in index) == expected


def test_split_then_merge_heads_simplifies():
    nodes = _reshape_chain((2, 37, 64), (2, 37, 4, 16), (2, 37, 64))
    assert tuple(str(e) for e in _compose(nodes, (2, 37, 64))) == ("i", "j", "k")


@pytest.mark.parametrize("chain", [
    ((6, 35), (210,), (6, 35)),
    ((6, 35), (10, 21), (6, 35)),
    ((6, 35), (2, 3, 5, 7), (6, 35)),
    ((4, 6), (8, 3), (4, 6)),
    ((2, 37, 64), (2, 37, 4, 16), (2, 37, 64)),
    ((12,), (3, 4), (2, 6), (4, 3), (12,)),
    ((3, 1, 37), (1, 111, 1), (37, 3)),
    ((1,), (1, 1), (1,)),
], ids=str)
def test_reshape_chains_evaluate_like_numpy(chain):
    """Whatever the simplifier leaves, the composed index reads the element numpy's
    row-major reshape puts there."""
    src, *shapes = chain
    nodes = _reshape_chain(src, *shapes)
    out = shapes[-1]
    index = _compose(nodes, out)
    x = np.arange(int(np.prod(src))).reshape(src)
    env = grid({chr(ord("i") + q): e for q, e in enumerate(out)})
    got = x[tuple(value(e, env) for e in index)] if env else x[tuple(int(e.const) for e in index)]
    np.testing.assert_array_equal(np.broadcast_to(got, out), x.reshape(out))


def test_a_whole_multiple_plus_a_smaller_part_drops_the_part():
    """HF's repeat_kv (expand + reshape) reads k at the flat index of (head, key, column)
    divided by n_rep x S x D: the key and column part is below the head's multiple, so
    the division is the head's alone (h // n_rep), and its remainder keeps the part."""
    ranges = {"h": 8, "s": 40, "d": 32}
    flat = var("h") * 1280 + var("s") * 32 + var("d")
    assert str(floordiv(flat, 5120, ranges)) == "h // 4"
    assert str(mod(flat, 5120, ranges)) == "(h % 4) * 1280 + s * 32 + d"
    # without the ranges nothing is dropped; where the key part can reach the head's multiple
    # only the column part (below 32) is
    assert str(floordiv(flat, 5120)) == "(h * 1280 + s * 32 + d) // 5120"
    assert str(floordiv(flat, 5120, {"h": 8, "s": 41, "d": 32})) == "(h * 40 + s) // 160"


@pytest.mark.parametrize("seed", range(3))
def test_common_factors_match_numpy(seed):
    """m * (a random form) + (a part in [0, m) or not) divided by m * k, and its remainder."""
    rng = random.Random(100 + seed)
    for _ in range(200):
        ranges = {n: rng.randint(1, 7) for n in "ijk"}
        m, k = rng.randint(2, 12), rng.randint(1, 6)
        big = _random_affine(rng, "ij")
        part = var("k") * rng.randint(0, 3) + rng.randint(0, 4)
        e = big * m + part
        env = grid(ranges)
        base = value(e, env)
        np.testing.assert_array_equal(value(floordiv(e, m * k, ranges), env), base // (m * k), err_msg=f"{e}")
        np.testing.assert_array_equal(value(mod(e, m * k, ranges), env), base % (m * k), err_msg=f"{e}")


def test_rename_of_variables_alone_is_substitutes_result():
    """rename keeps a variables-only form's terms as they are (its fast path); it must be what
    substituting the new variables gives, term order, merges and constants included."""
    rng = random.Random(5)
    names = ["a", "b", "c", "d"]
    for _ in range(300):
        e = const(rng.randint(-3, 3))
        for _ in range(rng.randint(0, 4)):
            e = e + var(rng.choice(names)) * rng.choice([-2, -1, 1, 3])
        if rng.random() < 0.3:
            e = e + floordiv(var("a") + var("b") * 4, 4, {"a": 4, "b": 8})
        mapping = dict(zip(names, rng.sample(["x", "y", "z", "a", "b"], 4)))
        if rng.random() < 0.2:      # two variables made one: their terms merge
            mapping["b"] = mapping["a"]
        want = substitute(e, {old: var(new) for old, new in mapping.items()})
        got = rename(e, mapping)
        assert got == want and str(got) == str(want)
