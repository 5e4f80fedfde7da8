"""Deterministic, Python-like text of expressions (the loop-IR printer builds on it).

Binary operations are fully parenthesised; ``//`` and ``%`` are floor division and floor
modulo; constants other than ``int32``/``float32``/``bool`` carry their dtype.
"""

from __future__ import annotations

from polytile.errors import DefinitionTypeError

from .expr import (And, Binary, Call, Cast, Cmp, Const, Expr, IterVar, Not, Or, Reduce,
                   Select, TensorRead, Var)

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "floormod": "%",
          "bitand": "&", "bitor": "|", "bitxor": "^", "shl": "<<", "shr": ">>"}
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def const_str(c: Const) -> str:
    v = c.value
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return f"{c.dtype}({str(v)!r})"
    if c.dtype == "bool":
        return "True" if v else "False"
    if c.dtype == "int32":
        return str(v)
    if c.dtype == "float32":
        return f"{v!r}f"
    if c.dtype == "float64":
        return repr(v)
    return f"{c.dtype}({v!r})"


class ExprPrinter:
    """Prints expressions; subclasses add ``print_<Class>`` methods for their own nodes."""

    def __call__(self, e) -> str:
        if isinstance(e, IterVar):
            e = e.var
        fn = getattr(self, "print_" + type(e).__name__, None)
        if fn is None:
            raise DefinitionTypeError(f"no printer for {type(e).__name__}")
        return fn(e)

    def print_Var(self, e: Var) -> str:
        return e.name

    def print_Const(self, e: Const) -> str:
        return const_str(e)

    def print_Cast(self, e: Cast) -> str:
        return f"{e.dtype}({self(e.value)})"

    def print_Binary(self, e: Binary) -> str:
        if e.op == "mul" and isinstance(e.b, Const) and e.b.value == -1 and \
                isinstance(e.b.value, float):
            return f"(-{self(e.a)})"  # float negation is built as x * -1.0 (exact in IEEE)
        if e.op in _INFIX:
            return f"({self(e.a)} {_INFIX[e.op]} {self(e.b)})"
        return f"{e.op}({self(e.a)}, {self(e.b)})"

    def print_Cmp(self, e: Cmp) -> str:
        return f"({self(e.a)} {_CMP[e.op]} {self(e.b)})"

    def print_And(self, e: And) -> str:
        return f"({self(e.a)} and {self(e.b)})"

    def print_Or(self, e: Or) -> str:
        return f"({self(e.a)} or {self(e.b)})"

    def print_Not(self, e: Not) -> str:
        return f"(not {self(e.a)})"

    def print_Select(self, e: Select) -> str:
        return f"({self(e.true_value)} if {self(e.cond)} else {self(e.false_value)})"

    def print_Call(self, e: Call) -> str:
        return f"{e.name}({', '.join(self(a) for a in e.args)})"

    def print_TensorRead(self, e: TensorRead) -> str:
        return f"{e.tensor.name}[{', '.join(self(i) for i in e.indices)}]"

    def print_Reduce(self, e: Reduce) -> str:
        axes = ", ".join(a.var.name for a in e.axis)
        s = f"{e.combiner.name}({self(e.source)}, axis=[{axes}]"
        if e.condition is not None:
            s += f", where={self(e.condition)}"
        if e.init is not None:
            s += f", init={self(e.init)}"
        return s + ")"


_PRINTER = ExprPrinter()


def expr_str(e: Expr) -> str:
    """Text of one expression."""
    return _PRINTER(e)
