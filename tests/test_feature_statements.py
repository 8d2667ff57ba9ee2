"""Each advanced feature's Kernel-IR statements have one home: their module in deplokit/ir
(kernel_tma, kernel_cp_async, kernel_mma, kernel_wgmma, kernel_split) says how each prints,
the feature's CUDA module how it renders and its simulator module how it runs, each through a
STATEMENTS table; the core's Kernel IR, renderer and interpreter name none of them."""
import ast
import typing
from pathlib import Path

import pytest

from deplokit.ir import kernel_cp_async, kernel_ir, kernel_mma, kernel_split, kernel_tma, kernel_wgmma
from deplokit.passes.lower import cuda
from deplokit.runtime.sim import exec as sim_exec

ROOT = Path(__file__).resolve().parent.parent
FEATURES = {kernel_tma: kernel_tma.TmaStmt, kernel_cp_async: kernel_cp_async.CpAsyncStmt,
            kernel_mma: kernel_mma.MmaStmt, kernel_wgmma: kernel_wgmma.WgmmaStmt,
            kernel_split: kernel_split.SplitStmt}
STATEMENTS = [cls for union in FEATURES.values() for cls in typing.get_args(union)]
CORE = ["deplokit/ir/kernel_ir.py", "deplokit/passes/lower/cuda.py", "deplokit/runtime/sim/exec.py"]


@pytest.mark.parametrize("cls", STATEMENTS, ids=lambda c: c.__name__)
def test_a_feature_statement_prints_renders_and_runs(cls):
    assert callable(getattr(cls, "text", None))
    assert cls in cuda.FEATURE_STATEMENTS and cls in sim_exec.FEATURE_STATEMENTS


@pytest.mark.parametrize("path", CORE)
def test_the_core_names_no_feature_statement(path):
    names = {cls.__name__ for cls in STATEMENTS} | {"TensorMap"}
    tree = ast.parse((ROOT / path).read_text())
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not used & names, sorted(used & names)


def test_a_feature_statement_says_its_locals_and_expressions():
    """kernel_ir finds a TMA wait's slot and phase, and renames its mbarrier, by asking the node."""
    slot, phase = kernel_ir.Var("s"), kernel_ir.Var("ph")
    wait = kernel_tma.MbarrierWait("full", phase, slot)
    assert kernel_ir.stmt_exprs(wait) == (phase, slot)
    assert kernel_ir.stmt_exprs(kernel_tma.MbarrierArrive("empty")) == ()
    k = kernel_ir.KernelFunc("k", (kernel_ir.Param("x"),), (1, 1, 1), (32, 1, 1),
                             (kernel_tma.MbarrierInit("x", 1, 2), wait))
    assert kernel_ir.declared_locals(k) == ["x", "full", "ph", "s"]
    renamed = kernel_ir.unclash_locals(k)
    assert renamed.body[0] == kernel_tma.MbarrierInit("x_1", 1, 2)      # it met the parameter x
    assert kernel_ir.declared_smem_bytes(k) == 16                         # two mbarriers of 8 bytes


def test_the_materializer_lowers_the_tensor_cores_statements_through_its_table():
    """k001 names none of the tensor cores' Tile-IR statements (ir/tile_mma.py): mma_lower's and
    wgmma_lower's LOWERINGS tables say which function lowers which."""
    from deplokit.ir import tile_mma
    from deplokit.passes.lower import k001_materialize
    classes = {tile_mma.FragmentLoad, tile_mma.MmaSync, tile_mma.WarpgroupMma}
    assert classes <= set(k001_materialize.FEATURE_STATEMENTS)
    tree = ast.parse((ROOT / "deplokit/passes/lower/k001_materialize.py").read_text())
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not used & {c.__name__ for c in classes}
