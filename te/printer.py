"""Deterministic, Python-like text of expressions (the loop-IR printer builds on it).

Binary operations are fully parenthesised; ``//`` and ``%`` are floor division and floor
modulo; constants other than ``int32``/``float32``/``bool`` carry their dtype.
"""

from __future__ import annotations

from polytile.errors import DefinitionTypeError

from .depth import deep
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
        return self.print(e)

    def print(self, e) -> str:
        """Text of ``e``. Children recurse through this plain method, not ``self(...)``:
        a call through ``__call__`` re-enters the interpreter from C at each level, which
        uses the C stack (deep expressions, see :mod:`polytile.te.depth`)."""
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
        return f"{e.dtype}({self.print(e.value)})"

    def print_Binary(self, e: Binary) -> str:
        if e.op == "mul" and isinstance(e.b, Const) and e.b.value == -1 and \
                isinstance(e.b.value, float):
            return f"(-{self.print(e.a)})"  # float negation is x * -1.0 (exact in IEEE)
        if e.op in _INFIX:
            return f"({self.print(e.a)} {_INFIX[e.op]} {self.print(e.b)})"
        return f"{e.op}({self.print(e.a)}, {self.print(e.b)})"

    def print_Cmp(self, e: Cmp) -> str:
        return f"({self.print(e.a)} {_CMP[e.op]} {self.print(e.b)})"

    def print_And(self, e: And) -> str:
        return f"({self.print(e.a)} and {self.print(e.b)})"

    def print_Or(self, e: Or) -> str:
        return f"({self.print(e.a)} or {self.print(e.b)})"

    def print_Not(self, e: Not) -> str:
        return f"(not {self.print(e.a)})"

    def print_Select(self, e: Select) -> str:
        t, c, f = self.print(e.true_value), self.print(e.cond), self.print(e.false_value)
        return f"({t} if {c} else {f})"

    def print_Call(self, e: Call) -> str:
        return f"{e.name}({', '.join(self.print(a) for a in e.args)})"

    def print_TensorRead(self, e: TensorRead) -> str:
        return f"{e.tensor.name}[{', '.join(self.print(i) for i in e.indices)}]"

    def print_Reduce(self, e: Reduce) -> str:
        axes = ", ".join(a.var.name for a in e.axis)
        # an element of a tuple reduction: which one (argmax.v0 is the index)
        name = e.combiner.name + (f".v{e.value_index}" if hasattr(e.combiner, "size") else "")
        s = f"{name}({self.print(e.source)}, axis=[{axes}]"
        if e.condition is not None:
            s += f", where={self.print(e.condition)}"
        if e.init is not None:
            s += f", init={self.print(e.init)}"
        return s + ")"


_PRINTER = ExprPrinter()


@deep("print")
def expr_str(e: Expr) -> str:
    """Text of one expression."""
    return _PRINTER(e)
