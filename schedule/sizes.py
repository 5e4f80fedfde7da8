"""Symbolic sizes of a schedule: which ``te.var`` are isl parameters, what they satisfy,
and where a built function reads their values.

Every free integer variable in a shape or a ``reduce_axis`` bound of a stage is a *size
parameter*. Lowering declares them as isl parameters (``isl_util.pfx``) under a *context*:
each tensor dimension is ``>= 0`` and each ``te.size_var`` is ``>= 0``; legality,
footprints and bounds checks then hold for every value the context allows, and isl's AST
is generated for all of them at once.

A size parameter that is not itself a scalar argument is *bound* to the first dimension
of an array argument that is exactly that variable (TVM binds buffer shapes the same
way): the built function takes ``f(a, b, c)`` and reads ``n`` off ``a.shape[0]``. It is
appended to the function's parameters, after the user's, and recorded in
``PrimFunc.attrs["size_params"]`` as ``(var, argument position, dimension)``; the
context's constraints go to ``attrs["size_checks"]`` (checked at every call).
"""

from __future__ import annotations

import islpy as isl

from polytile.errors import LoweringError, fail
from polytile.te import dtype as dt
from polytile.te import symbolic as sym
from polytile.te.expr import Binary, Var, binary
from polytile.te.visitor import collect
from polytile.te.scan import ScanOp
from polytile.te.tensor import ComputeOp, PlaceholderOp

from . import isl_util as iu
from .loop_ir import Buffer
from .relations import symbolic_split


def _tensor_dims(sch) -> list:
    """Every symbolic shape dimension of every stage, with who has it (and for a scan of
    symbolic length, its steps past the init rows: ``te.scan`` needs
    ``1 <= init.shape[0] <= update.shape[0]``)."""
    out = []
    for st in sch.stages:
        op = st.op
        steps, rows = ((op.update[0].shape[0], op.init[0].shape[0])
                       if isinstance(op, ScanOp) else (0, 0))
        if not (sym.is_static(steps) and sym.is_static(rows)):
            out.append((sym.sub(steps, rows), f"the steps of scan {op.name!r} past its "
                        f"{rows} init row{'s' if rows != 1 else ''}"))
        if not sym.is_static(rows):   # TVM's scan axis starts at init.shape[0], L >= 1
            out.append((sym.sub(rows, 1), f"the {rows} init rows of scan {op.name!r}, "
                        "minus one (a scan has at least one init row)"))
        if isinstance(op, (ComputeOp, PlaceholderOp)):
            for k, d in enumerate(op.output(0).shape):
                if not sym.is_static(d):
                    out.append((d, f"dimension {k} of {op.name!r}"))
    return out


def size_vars(sch, args) -> list[Var]:
    """The size parameters of ``sch``: free integer variables of shapes and axis ranges,
    in order of first appearance."""
    found: list[Var] = []

    def add(x):
        for v in sym.params_of(x):
            if all(v is not w for w in found):
                found.append(v)

    for st in sch.stages:
        op = st.op
        if isinstance(op, PlaceholderOp):
            for d in op.output(0).shape:
                add(d)
        elif isinstance(op, ComputeOp):
            for iv in list(op.axis) + list(op.reduce_axis):
                add(iv.dom.min)
                add(iv.dom.extent)
            for rel in _symbolic_splits(st):
                add(rel.sym)
                add(rel.given)
    for a in args or ():
        if isinstance(a, Var) and any(a is v for v in found) and not dt.is_int(a.dtype):
            fail("lower", f"the size parameter {a.name!r} has dtype {a.dtype}",
                 "an integer te.var for a size")
    return found


#: Ends the description of a size check ``x - 1 >= 0``: the call-time error then shows
#: ``x`` and asks for at least 1 (:func:`polytile.targets.runtime_support`).
AT_LEAST_1 = ", minus 1 (it must be at least 1)"


def context(sch, vars_: list[Var]) -> tuple[isl.Set | None, list]:
    """The parameter context (an isl parameter set) and its constraints as
    ``(expression, description)`` pairs: every symbolic tensor dimension and every
    ``te.size_var`` is ``>= 0``."""
    if not vars_:
        return None, []
    checks, seen = [], set()
    for d, who in _tensor_dims(sch):
        if str(d) not in seen:   # one assumption per distinct expression
            seen.add(str(d))
            checks.append((d, who))
    checks += [(v, f"te.size_var {v.name!r}") for v in vars_
               if sym.is_size_var(v) and str(v) not in seen]
    names = [iu.param_name(v) for v in vars_]
    conds = [f"{iu.num(e)} >= 0" for e, _ in checks]
    # symbolic split factors: checked at each call; isl assumes them where it can read them
    for st in sch.stages:
        for rel in _symbolic_splits(st):
            what = "nparts" if rel.given is not rel.sym else "factor"
            e = binary("sub", rel.given, 1)
            checks.append((e, f"the {what} of the split of {rel.parent.name!r} in stage "
                           f"{st.name!r}{AT_LEAST_1}"))
            try:
                conds.append(f"{iu.num(e)} >= 0")
            except LoweringError:
                pass   # not affine (nparts=p of a symbolic extent, p a te.var): runtime only
    # derived sizes (a dimension n // x): equal to their expression, checked at each call
    # (isl only knows them >= 0); a divisor in it at least 1
    for v in vars_:
        e = sym.derived_of(v)
        if e is None:
            continue
        what = f"the size {v.name!r} (a dimension {e})"
        checks += [(binary("sub", v, e), f"{what}, minus {e}"),
                   (binary("sub", e, v), f"{e}, minus {what}")]
        for d in collect(e, Binary):
            if d.op in ("floordiv", "floormod", "truncdiv", "truncmod"):
                checks.append((binary("sub", d.b, 1), f"the divisor {d.b} in {what}"
                               f"{AT_LEAST_1}"))
    ctx = isl.Set(f"[{', '.join(names)}] -> {{ : {' and '.join(conds) or '1 = 1'} }}")
    return ctx, checks


def _symbolic_splits(st) -> list:
    return [rel for rel in st.relations if symbolic_split(rel)]


def bind(params: list, vars_: list[Var], who: str) -> list[tuple[Var, int, int]]:
    """Where each size parameter that is not a scalar argument gets its value: the first
    array argument with a dimension exactly equal to it.

    Raises
    ------
    ScheduleError
        For a size parameter that no argument dimension equals (only expressions of it,
        such as ``n + 1``, or no argument at all), naming it.
    """
    out = []
    for v in vars_:
        if any(p is v for p in params):
            continue
        where = next(((k, q) for k, p in enumerate(params) if isinstance(p, Buffer)
                      for q, d in enumerate(p.shape) if d is v), None)
        if where is None:
            fail(who, f"the symbolic size {v.name!r} is not a dimension of any argument "
                 "array, so a call cannot read its value", "an argument with a dimension "
                 f"equal to {v.name!r}, or {v.name!r} itself in args (a scalar argument)",
                 hint=f"add {v.name} to the argument list")
        out.append((v, *where))
    return out
