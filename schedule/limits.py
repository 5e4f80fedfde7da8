"""Code-size limits of ``unroll``: which annotated loops really get unrolled.

Unrolling copies a loop's body once per iteration, and nested unrolled loops multiply: a
loop of 37 iterations around one of 32 copies its body 1,184 times, and LLVM's build time
grows faster than the code. ``limit_unrolls`` bounds, before code generation, what one
loop may expand to:

* a loop of more than ``MAX_UNROLL`` iterations is not unrolled;
* a loop whose unrolled code would hold more than ``MAX_UNROLL_STMTS`` statements (its
  iterations times the statements of its body, where the body's own unrolled loops count
  expanded and other loops count ``LOOP_STMTS`` statements plus their body) is not
  unrolled.

Inner loops are decided first, so the budget goes to the innermost unrolls and the outer
ones stay loops. Each loop kept rolled gets a :class:`~polytile.errors.PolytileWarning`
naming the stage, the loop and the numbers; it still runs serially (LLVM may unroll it
partially by its own heuristics). The counts come from the loop nest of the model, before
AST generation: separating full tiles from partial ones (``isolate``) adds at most one
more copy of a body, as a loop.
"""

from __future__ import annotations

from polytile.errors import fail, format_error, warn
from polytile.te import symbolic as sym

from .kinds import LoopKind, ThreadTag
from .polymodel import LoopNode, Model, PolyStmt
from .passes.loops import LOOP_STMTS, MAX_UNROLL, MAX_UNROLL_STMTS


def limit_unrolls(model: Model) -> set[int]:
    """The keys of ``unroll`` loops of ``model`` to keep rolled (see module doc); warns
    once for each of them.

    Parameters
    ----------
    model : Model
        The polyhedral model (its loop nest and the extents of its loops).

    Returns
    -------
    set of int
        ``LoopNode.key`` of every annotated loop that must stay a loop.
    """
    rolled: set[int] = set()
    for n in model.nest:
        _size(n, rolled)
    return rolled


def _size(n, rolled: set[int]) -> int:
    """Statements emitted for nest node ``n`` once its kept unrolls are expanded; decides
    the loops inside ``n`` (post-order) and ``n`` itself."""
    if isinstance(n, PolyStmt):
        return 1
    tz = n.plan.stage.tensorized
    if tz is not None and tz[0] is n.iter_var:
        return 1    # the nest under a tensorized loop is one intrinsic call
    body = sum(_size(c, rolled) for c in n.children)
    kind = n.annotation
    if kind is ThreadTag.VTHREAD:   # virtual threads are always unrolled
        ext = n.plan.extent(n.iter_var)
        if not sym.is_static(ext):
            fail("bind", f"loop {n.iter_var.name!r} of stage {n.plan.name!r} is bound to "
                 f"vthread but has the symbolic extent {sym.text(ext)} (parameters "
                 f"{', '.join(v.name for v in sym.params_of(ext))})", "a constant extent "
                 "for a virtual thread (its iterations are unrolled)",
                 hint="split the loop by a constant factor and bind the inner part")
        return sym.static(ext) * body
    if n.binding is not None:       # a GPU index: a filter, not a loop
        return body
    if kind is LoopKind.VECTORIZED and not sym.is_static(n.plan.extent(n.iter_var)):
        ext = n.plan.extent(n.iter_var)
        fail("vectorize", f"loop {n.iter_var.name!r} of stage {n.plan.name!r} has the "
             f"symbolic extent {sym.text(ext)} (parameters "
             f"{', '.join(v.name for v in sym.params_of(ext))})", "a constant number of "
             "vector lanes", hint=f"split {n.iter_var.name!r} by a constant factor and "
             "vectorize the inner loop (full tiles are vectorized, the tail is exact)")
    if kind is not LoopKind.UNROLLED:
        return LOOP_STMTS + body
    ext = n.plan.extent(n.iter_var)
    if not sym.is_static(ext):   # a symbolic trip count stays a loop (as in TVM)
        rolled.add(n.key)
        return LOOP_STMTS + body
    ext = sym.static(ext)
    if ext <= MAX_UNROLL and ext * body <= MAX_UNROLL_STMTS:
        return ext * body
    rolled.add(n.key)
    _warn(n, ext, body)
    return LOOP_STMTS + body


def _inner_unrolls(n: LoopNode) -> list[str]:
    out: list[str] = []
    for c in n.children:
        if isinstance(c, LoopNode):
            if c.annotation in (LoopKind.UNROLLED, ThreadTag.VTHREAD):
                out.append(f"{c.iter_var.name!r} ({c.plan.extent(c.iter_var)} iterations)")
            out += _inner_unrolls(c)
    return out


def _warn(n: LoopNode, ext: int, body: int) -> None:
    stage, name = n.plan.name, n.iter_var.name
    if ext > MAX_UNROLL:
        what = (f"loop {name!r} of stage {stage!r} has {ext} iterations, more than "
                f"MAX_UNROLL = {MAX_UNROLL}")
        factor = MAX_UNROLL
        while factor > 1 and factor * body > MAX_UNROLL_STMTS:
            factor //= 2
    else:
        inner = _inner_unrolls(n)
        what = (f"unrolling loop {name!r} of stage {stage!r} would copy its body of {body} "
                f"statements {ext} times ({ext * body} statements"
                + (f", with the unrolled loop{'s' * (len(inner) > 1)} {', '.join(inner)} "
                   f"inside" if inner else "")
                + f"), more than MAX_UNROLL_STMTS = {MAX_UNROLL_STMTS}")
        factor = max(1, MAX_UNROLL_STMTS // body)
    hint = (f"unroll a split part of it: xo, xi = s[{stage}].split({name}, factor={factor}); "
            f"s[{stage}].unroll(xi)" if factor > 1 else "unroll fewer nested loops")
    warn(format_error("unroll", what, f"{name!r} is kept as a loop", hint=hint))
