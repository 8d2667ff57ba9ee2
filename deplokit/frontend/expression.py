"""`-c EXPR`: turn a line of Python into a program and its example inputs.

The text is Python evaluated with `torch`, `nn` (torch.nn) and `F` (torch.nn.functional)
in scope. It is one expression, or several statements separated by `;` or newlines of
which the last is the expression whose value is the program's output:

    nn.RMSNorm(2048)(torch.randn(1,32,2048))
    x = torch.randn(16,64); bias = torch.randn(64); w = torch.randn(64,16); torch.relu(torch.matmul(x + bias, w))

How the text becomes a program:

* every tensor-factory call (torch.randn, torch.zeros, torch.arange, torch.tensor, ...)
  becomes an INPUT of the program, and the tensor it returns is the example input;
* every other subexpression that does not depend on an input (a module construction such
  as `nn.RMSNorm(2048)`, `torch.relu`, a size computed from constants) is evaluated ONCE
  and its value reused, so a module's random weights are the same for capture and for the
  eager comparison; statements that compute only such values run once and are not part of
  the program;
* the rest, which depends on the inputs, is the program: a generated function whose
  parameters are the inputs (`Program.code` shows it).

Inputs are named after the variable they are assigned to (`x = torch.randn(...)`), else
after the module's forward parameter when the whole text is `Module(...)(factory(...))`
(`x` for nn.RMSNorm, which is then compiled as the module itself), else x0, x1, ...

The text is evaluated after torch.manual_seed(0), so it always gives the same inputs and
weights. This runs arbitrary Python code: it has the same trust as running a script.
"""
from __future__ import annotations

import ast
import copy
import inspect
import keyword
from dataclasses import dataclass, field

import torch

from ..errors import ExpressionError
from . import moe_ops  # noqa: F401  (registers torch.ops.deplokit.grouped_mm for -c texts)
from .expression_eval import FILENAME, evaluate_once, node_position, position, scope

FACTORIES = frozenset({
    "randn", "rand", "randint", "randperm", "normal",
    "randn_like", "rand_like", "randint_like",
    "zeros", "ones", "full", "empty", "eye", "arange", "linspace",
    "zeros_like", "ones_like", "full_like", "empty_like",
    "tensor", "as_tensor",
})

# Names an input may not take: capture's function wrapper reserves `self` and `fn`, and
# the generated function needs torch, nn, F and the _dk_ names.
_RESERVED = frozenset({"self", "fn", "torch", "nn", "F", "program"})

# Nodes whose inside is left alone: names bound in them change per call or iteration.
_OPAQUE = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.JoinedStr)


@dataclass
class Program:
    """A program and its example inputs, ready for `deplokit.compile(p.fn, *p.inputs)`."""
    fn: object                    # an nn.Module, or a function taking the inputs positionally
    inputs: tuple                 # example input tensors
    names: tuple                  # input names in order (= the fn's parameter names)
    source: str = ""              # the text it came from
    code: str = field(default="", repr=False)   # the generated function ("" for a module)


def load_expression(text: str) -> Program:
    """Evaluate `text` (see the module docstring) and return the program it describes."""
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError("empty expression; give Python code such as 'torch.relu(torch.randn(4, 4))'")
    tree = _parse(text)
    planner = _Planner()
    planner.analyse(tree)
    factory_values, const_values, env = evaluate_once(tree, text)
    return planner.build(tree, text, factory_values, const_values, env)


# -- parsing ------------------------------------------------------------------------------------

def _parse(text: str) -> ast.Module:
    try:
        tree = ast.parse(text, filename=FILENAME, mode="exec")
    except SyntaxError as e:
        raise ExpressionError(f"malformed expression{position(e.lineno, e.offset)}: {e.msg}") from None
    except ValueError as e:  # null bytes and the like
        raise ExpressionError(f"malformed expression: {e}") from None
    if not tree.body:
        raise ExpressionError("empty expression; give Python code such as 'torch.relu(torch.randn(4, 4))'")
    last = tree.body[-1]
    if not isinstance(last, ast.Expr):
        raise ExpressionError(f"the last statement must be the expression whose value is the output; "
                              f"found {_describe(last)}{node_position(last)}")
    for stmt in tree.body[:-1]:
        if not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Import, ast.ImportFrom)):
            raise ExpressionError(f"only assignments and expressions may come before the final expression; "
                                  f"found {_describe(stmt)}{node_position(stmt)}")
    return tree


def _describe(stmt: ast.stmt) -> str:
    words = {ast.Assign: "an assignment", ast.AugAssign: "an assignment", ast.AnnAssign: "an assignment",
             ast.For: "a 'for' loop", ast.While: "a 'while' loop", ast.If: "an 'if' statement",
             ast.FunctionDef: "a 'def'", ast.ClassDef: "a 'class'", ast.Return: "a 'return'",
             ast.With: "a 'with' statement", ast.Try: "a 'try' statement", ast.Delete: "a 'del'",
             ast.Pass: "'pass'", ast.Raise: "a 'raise'", ast.Assert: "an 'assert'"}
    return words.get(type(stmt), f"a '{type(stmt).__name__}' statement")


def _is_factory(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
            and node.func.attr in FACTORIES)


def _is_literal(node: ast.AST) -> bool:
    """Input-free values cheap and safe to leave inline: literals and containers of them."""
    return all(isinstance(n, (ast.Constant, ast.UnaryOp, ast.BinOp, ast.Tuple, ast.List, ast.Slice,
                              ast.expr_context, ast.operator, ast.unaryop)) for n in ast.walk(node))


def _has_slice(node: ast.AST) -> bool:
    return isinstance(node, ast.Slice) or (
        isinstance(node, ast.Tuple) and any(isinstance(e, ast.Slice) for e in node.elts)
    )


# -- analysis -----------------------------------------------------------------------------------
# Marks are attributes on the AST nodes (copy.deepcopy keeps them):
#   node._dk = ("input", k)  a factory call, input number k in evaluation order
#   node._dk = ("const", k)  a maximal input-free subexpression, evaluated once
#   stmt._dk_dynamic         the statement depends on an input and belongs to the program

class _Planner:
    def __init__(self):
        self.n_inputs = 0
        self.n_consts = 0
        self.dynamic: set[str] = set()          # names whose value depends on an input
        self.const_names: set[str] = set()      # names bound to input-free values
        self.assigned: dict[int, str] = {}      # input k -> the variable it is assigned to

    def _depends(self, node: ast.AST) -> bool:
        return any(_is_factory(n) or (isinstance(n, ast.Name) and n.id in self.dynamic) for n in ast.walk(node))

    def _mark(self, node: ast.expr) -> None:
        if _is_factory(node):
            node._dk = ("input", self.n_inputs)
            self.n_inputs += 1
            return
        if not self._depends(node) and not _has_slice(node) and not isinstance(node, ast.Starred):
            if not _is_literal(node):
                node._dk = ("const", self.n_consts)
                self.n_consts += 1
            return
        if isinstance(node, _OPAQUE):
            for sub in ast.walk(node):
                if _is_factory(sub):
                    raise ExpressionError(f"tensor factory torch.{sub.func.attr}(...){node_position(sub)} is inside a "
                                          "comprehension, lambda or f-string, which is not supported; "
                                          "assign it to a name first")
            return
        if isinstance(node, ast.NamedExpr):
            raise ExpressionError(f"':='{node_position(node)} is not supported")
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self._mark(child)
            elif isinstance(child, ast.keyword):
                self._mark(child.value)

    def analyse(self, tree: ast.Module) -> None:
        for stmt in tree.body:
            stmt._dk_dynamic = False
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    self._bind((alias.asname or alias.name).split(".")[0], False)
                continue
            if stmt.value is None:       # a bare annotation, `x: int`
                continue
            targets = (stmt.targets if isinstance(stmt, ast.Assign)
                       else [] if isinstance(stmt, ast.Expr) else [stmt.target])
            dynamic = self._depends(stmt.value) or (
                isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id in self.dynamic
            )
            if dynamic or stmt is tree.body[-1]:
                stmt._dk_dynamic = True
                self._mark(stmt.value)
            for target in targets:
                if dynamic and not _plain_target(target):
                    raise ExpressionError(f"assignment target{node_position(target)}: a value that depends on an input "
                                          "can only be assigned to names")
                self._name_inputs(target, stmt.value)
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        self._bind(n.id, dynamic)
        self.final = tree.body[-1].value

    def _bind(self, name: str, dynamic: bool) -> None:
        (self.dynamic if dynamic else self.const_names).add(name)
        (self.const_names if dynamic else self.dynamic).discard(name)

    def _name_inputs(self, target, value) -> None:
        if isinstance(target, ast.Name) and getattr(value, "_dk", ("",))[0] == "input":
            self.assigned.setdefault(value._dk[1], target.id)
        elif (isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List))
              and len(target.elts) == len(value.elts)):
            for t, v in zip(target.elts, value.elts):
                self._name_inputs(t, v)

    # -- the program ------------------------------------------------------------------------
    def build(self, tree, text, factory_values, const_values, env) -> Program:
        if not factory_values:
            raise ExpressionError("the expression has no inputs; create them with a tensor factory such as "
                                  "torch.randn(...), e.g. 'torch.relu(torch.randn(4, 4))'")
        order = sorted(factory_values)
        inputs = tuple(factory_values[k].detach() for k in order)
        for v in const_values.values():
            if isinstance(v, torch.nn.Module):
                v.eval()   # deplokit compiles inference; the eager comparison must agree

        module = self._module_form(const_values, order)
        if module is not None:
            return Program(module[0], inputs, tuple(module[1]), text)

        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        taken: set[str] = set()

        def free(name: str) -> bool:
            return not (name in taken or name in _RESERVED or keyword.iskeyword(name) or name.startswith("_dk_"))

        def claim(base: str) -> str:
            name, i = base, 1
            while not free(name):    # a suffixed name must not clash with one in the text either
                while f"{base}_{i}" in used:
                    i += 1
                name, i = f"{base}_{i}", i + 1
            taken.add(name)
            return name

        names = {k: claim(self.assigned[k]) for k in order if k in self.assigned}
        i = 0
        for k in order:
            if k not in names:
                while not free(f"x{i}") or f"x{i}" in used:
                    i += 1
                names[k] = claim(f"x{i}")
        params = [names[k] for k in order]

        body = _Substitute(names).visit(copy.deepcopy(tree)).body
        stmts = [s for s in body[:-1] if s._dk_dynamic and not _self_assignment(s)]
        fn_def = ast.FunctionDef(
            name="program",
            args=ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], vararg=None,
                               kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
            body=stmts + [ast.Return(value=body[-1].value)], decorator_list=[], returns=None, type_params=[])
        code = ast.unparse(ast.fix_missing_locations(ast.Module(body=[fn_def], type_ignores=[])))
        glob = scope()
        # Input-free names stay reachable from code that is not hoisted (lambdas, comprehensions).
        glob.update({n: env[n] for n in self.const_names if n in env})
        glob.update({f"_dk_c{k}": v for k, v in const_values.items()})
        exec(compile(code, "<deplokit program>", "exec"), glob)
        return Program(glob["program"], inputs, tuple(params), text, code)

    def _module_form(self, const_values, order):
        """`Module(...)(factory(...), ...)`: the program is the module itself, and its inputs
        take the names of its forward parameters."""
        final = self.final
        if not (isinstance(final, ast.Call) and not final.keywords
                and getattr(final.func, "_dk", ("",))[0] == "const"):
            return None
        module = const_values.get(final.func._dk[1])
        if not isinstance(module, torch.nn.Module):
            return None
        if [getattr(a, "_dk", None) for a in final.args] != [("input", k) for k in order]:
            return None
        if any(k in self.assigned for k in order):
            return None
        try:
            params = [p for p in inspect.signature(module.forward).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            return None
        names = [p.name for p in params[:len(order)]]
        if len(names) != len(order) or len(set(names)) != len(names) or set(names) & {"self", "fn"}:
            return None
        return module, names


def _self_assignment(stmt: ast.stmt) -> bool:
    """`x = x` or `x, y = (x, y)`, left when an input takes the name it is assigned to."""
    def same(t, v):
        if isinstance(t, ast.Name) and isinstance(v, ast.Name):
            return t.id == v.id
        if isinstance(t, (ast.Tuple, ast.List)) and isinstance(v, (ast.Tuple, ast.List)):
            return len(t.elts) == len(v.elts) and all(same(a, b) for a, b in zip(t.elts, v.elts))
        return False
    return isinstance(stmt, ast.Assign) and all(same(t, stmt.value) for t in stmt.targets)


def _plain_target(target: ast.expr) -> bool:
    if isinstance(target, ast.Name):
        return True
    if isinstance(target, ast.Starred):
        return _plain_target(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_plain_target(e) for e in target.elts)
    return False


class _Substitute(ast.NodeTransformer):
    """Factory -> its input parameter; constant -> the name of its hoisted value."""

    def __init__(self, names):
        self.names = names

    def visit(self, node):
        mark = getattr(node, "_dk", None)
        if mark is None:
            return super().visit(node)
        name = self.names[mark[1]] if mark[0] == "input" else f"_dk_c{mark[1]}"
        return ast.copy_location(ast.Name(name, ast.Load()), node)
