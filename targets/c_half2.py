"""The ``half2`` pragma of the CUDA printer: a float16 loop printed two lanes an instruction.

A vectorized (or unrolled) loop of constant even extent whose body stores one float16 value
(optionally under a guard: the pair where both lanes hold, else lane by lane) is printed
by pairs of lanes: float16 ``+``, ``-``, ``*`` as ``__hadd2``, ``__hsub2``, ``__hmul2``,
``a * b + c`` as ``__hfma2`` (one rounding, as a float32 FMA contraction), float32 values
converted two at a time (``__floats2half2_rn``), other float16 operands packed from their
lanes (``__halves2half2``; ``__half2half2`` where both lanes are one value). cuda_fp16.h
writes scalar half arithmetic as inline assembly, which nvcc neither fuses nor pairs: the
loop's arithmetic takes half the instructions. Lanes' values are those of the statement
in float16 (each lane's operations in the same order), except for the fused roundings.
"""

from __future__ import annotations

from polytile.errors import BuildError, format_error
from polytile.schedule.kinds import LoopKind
from polytile.schedule.loop_ir import For, IfThenElse, LetStmt, Load, Store, stmt_str
from polytile.schedule.passes.simplify import simplify_expr
from polytile.te.expr import Binary, Cast, Const
from polytile.te.visitor import ExprMutator, replace_node, substitute

from .c_expr import strip_parens

#: The hint pragma that packs a float16 loop's arithmetic into ``half2`` (CUDA).
HALF2 = "half2"


def _inline_lets(body):
    """``body`` without its leading lets (the share pass binds a lane's repeated
    subexpressions): their values substituted, innermost first (the expressions are
    pure, so each lane computes the same values)."""
    lets = []
    while isinstance(body, LetStmt):
        lets.append(body)
        body = body.body
    for let in reversed(lets):
        env = {let.var: let.value}
        if isinstance(body, Store):
            body = Store(body.buffer, tuple(substitute(i, env) for i in body.indices),
                         substitute(body.value, env))
        elif isinstance(body, IfThenElse) and body.else_case is None:
            body = IfThenElse(substitute(body.cond, env), _inline_lets(
                LetStmt(let.var, let.value, body.then_case)), None)
        else:
            return lets[0]   # not of the pragma's form: the caller says so
    return body


class _LaneIndices(ExprMutator):
    """Simplifies the indices of the loads of one lane (the loop variable replaced by a
    constant), leaving the arithmetic on the values as it is."""

    def visit_Load(self, e: Load):
        return replace_node(e, {"indices": tuple(simplify_expr(i) for i in e.indices)})


def half2_loop(p, s: For, depth: int) -> None:
    """Print loop ``s`` with the ``half2`` pragma (:meth:`polytile.schedule.stage.Stage.pragma`)
    through the printer ``p`` (a ``CPrinter`` of the CUDA dialect) at indentation ``depth``: ``s``
    (a constant even extent, its body one float16 ``Store``) unrolled by pairs of
    lanes, the float16 additions, subtractions and multiplications of each pair as one
    ``half2`` instruction (``__hadd2``, ``__hsub2``, ``__hmul2``; ``a * b + c`` as
    ``__hfma2``, one rounding), every other float16 value packed from its two lanes."""
    n = s.extent.value if isinstance(s.extent, Const) else None
    body, guard = _inline_lets(s.body), None
    if isinstance(body, IfThenElse) and body.else_case is None:
        # a guarded tail: the pair where both lanes are in bounds, else lane by lane
        body, guard = _inline_lets(body.then_case), body.cond
    if (s.kind not in (LoopKind.VECTORIZED, LoopKind.UNROLLED) or n is None or n % 2
            or not isinstance(s.min, Const) or s.step != 1 or not isinstance(body, Store)
            or body.buffer.dtype != "float16" or body.value.dtype != "float16"):
        raise BuildError(format_error(
            p.who, f"loop {s.var.name!r} has the pragma {HALF2!r} but is a {s.kind} "
            f"loop of extent {stmt_str(s.extent) if n is None else n} with body "
            f"{type(body).__name__}"
            + (f" of {body.buffer.name!r} ({body.buffer.dtype}, value "
               f"{body.value.dtype})" if isinstance(body, Store) else ""),
            "a vectorized or unrolled loop of constant even extent whose body stores "
            "one float16 value (a vectorized float16 stage, as layernorm's output)",
            Kernel=p.kname))
    b = body.buffer
    fuse = {"add": "__hadd2", "sub": "__hsub2", "mul": "__hmul2"}

    def lane(e, k: int):
        v = substitute(e, {s.var: Const(s.var.dtype, s.min.value + k)})
        return _LaneIndices().visit(v)

    def pair(e, k: int) -> str:
        if isinstance(e, Binary) and e.dtype == "float16" and e.op in fuse:
            for m, c in ((e.a, e.b), (e.b, e.a)):
                if e.op == "add" and isinstance(m, Binary) and m.op == "mul":
                    return f"__hfma2({pair(m.a, k)}, {pair(m.b, k)}, {pair(c, k)})"
            return f"{fuse[e.op]}({pair(e.a, k)}, {pair(e.b, k)})"
        if isinstance(e, Cast) and e.dtype == "float16" and e.value.dtype == "float32":
            return (f"__floats2half2_rn({strip_parens(p.expr(lane(e.value, k)))}, "
                    f"{strip_parens(p.expr(lane(e.value, k + 1)))})")
        lo, hi = (p.expr(lane(e, k)), p.expr(lane(e, k + 1)))
        if e.dtype != "float16":
            lo, hi = (p.cast(x, e.dtype, "float16") for x in (lo, hi))
        if lo == hi:
            return f"__half2half2({strip_parens(lo)})"
        return f"__halves2half2({strip_parens(lo)}, {strip_parens(hi)})"

    for k in range(0, n, 2):
        dst = [f"{p.buffer(b)}[{p.index(b, tuple(lane(i, k + h) for i in body.indices))}]"
               for h in (0, 1)]
        d = depth
        if guard is not None:
            conds = [strip_parens(p.expr(lane(guard, k + h))) for h in (0, 1)]
            p.emit(depth, f"if (({conds[0]}) && ({conds[1]})) {{")
            d += 1
        p.emit(d, f"{{ const half2 pt_h2 = {pair(body.value, k)};")
        p.emit(d + 1, f"{dst[0]} = __low2half(pt_h2);")
        p.emit(d + 1, f"{dst[1]} = __high2half(pt_h2); }}")
        if guard is not None:
            p.emit(depth, "} else {")
            for h in (0, 1):
                p.emit(depth + 1, f"if ({conds[h]}) {dst[h]} = "
                                     f"{strip_parens(p.expr(lane(body.value, k + h)))};")
            p.emit(depth, "}")
