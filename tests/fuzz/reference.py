"""A numpy evaluator of tensor-expression definitions, independent of polytile's lowering.

:func:`evaluate` walks the *definition* (``te`` expression nodes, ``ComputeOp`` bodies,
``Reduce`` with its combiner, ``where`` and ``init``) and computes every tensor with
vectorized numpy over index grids: a compute of shape ``(E0, E1)`` reducing over
``(R0,)`` evaluates its body once on a broadcast grid of shape ``(E0, E1, R0)`` and reduces
the last axis. No schedule, loop IR or code generator is involved.

Semantics (those of ``te/expr.py``; see its module docstring):

* integers are computed in their declared dtype with two's-complement wrap-around;
  ``floordiv``/``floormod`` round toward negative infinity, ``truncdiv``/``truncmod``
  toward zero;
* floats are computed in float64 and rounded to the declared dtype after every operation
  (numpy's float16/float32 arithmetic is correctly rounded, as IEEE code without fast-math
  is), so an exactly representable computation is reproduced bit for bit;
* float16 (and bfloat16) reductions accumulate in float32 and are rounded once at the end
  (the project's rule; float32 and float64 reductions accumulate in their own dtype);
* ``max``/``min`` propagate NaN like ``np.maximum``/``np.minimum``, elementwise and in
  reductions; ``Select`` uses only the chosen operand.

Error bounds. Next to each value the evaluator carries a rigorous bound on how far a correct
compiled program may be from it, per element (``err``). It is zero for integers and for
float computations that are exact, and grows only where a correct compiler may legitimately
differ: the order of a float reduction (``u * (n - 1) * sum|x|`` unless every partial sum is
exactly representable), fused multiply-add contraction of ``a * b + c`` (the rounding of the
product), and math-library functions (2 ulps of the result). Errors are propagated through
later operations (``|a| e_b + |b| e_a`` for products, the image of ``[x - e, x + e]`` for
functions) and every rounding of an inexact value adds one ulp. ``mag`` is the magnitude of
the computation (the same expression over absolute values), for targets that may keep float16
intermediates in float32.

Elements whose correct value a compiler may legitimately choose are *unsure* and not
compared: a comparison or float-to-int cast of an inexact value whose interval straddles the
threshold, integer division by zero, an out-of-range float-to-int cast, or a shift by the
bit width or more (undefined behaviour). An out-of-bounds read that the definition performs
(not one guarded away by ``if_then_else``) raises :class:`ReferenceError`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polytile.te import dtype as dt
from polytile.te.expr import (And, Binary, Call, Cast, Cmp, CommReducer, Const, Not, Or,
                              Reduce, Select, TensorRead, TupleCommReducer, Var)
from polytile.te.scan import ScanOp
from polytile.te.tensor import ComputeOp, PlaceholderOp, Tensor

from .refvalues import (ACCUMULATOR, UNIT, ReferenceError, Val, call, cast, finfo,
                        float_binary, int_binary, mask_or, round_to, rounded, storage_dtype,
                        ulp, wrap)


@dataclass
class Result:
    """A tensor computed by :func:`evaluate`: ``value`` (numpy array of the tensor's dtype),
    ``err`` and ``mag`` (float64 arrays, floats only, else None) and ``unsure`` (bool)."""

    value: np.ndarray
    err: np.ndarray | None
    mag: np.ndarray | None
    unsure: np.ndarray


class _Eval:
    def __init__(self, tensors: dict):
        self.tensors = tensors   # id(op) -> (Result, oob-free)
        self.env: dict = {}

    # ------------------------------------------------------------------ leaves
    def visit(self, e) -> Val:
        return getattr(self, "visit_" + type(e).__name__)(e)

    def visit_Const(self, e: Const) -> Val:
        if e.dtype == "bool":
            return Val(np.array(bool(e.value)), "bool")
        if dt.is_float(e.dtype):
            return Val(round_to(float(e.value), e.dtype), e.dtype)
        return Val(np.array(e.value, dtype=storage_dtype(e.dtype)), e.dtype)

    def visit_Var(self, e: Var) -> Val:
        if e not in self.env:
            raise ReferenceError(f"reference: free variable {e.name!r} (scalar parameters "
                                 f"are not supported)")
        return self.env[e]

    def visit_TensorRead(self, e: TensorRead) -> Val:
        res: Result = self.tensors[id(e.tensor.op)][e.tensor.value_index]
        shape = e.tensor.shape
        idx = [self.visit(i) for i in e.indices]
        unsure = None
        for i in idx:
            unsure = mask_or(unsure, i.unsure)
        if not idx:
            v = res.value[()]
            err = None if res.err is None else res.err[()]
            mag = None if res.mag is None else res.mag[()]
            return Val(np.asarray(v if e.dtype == "bool" or dt.is_int(e.dtype)
                                  else np.float64(v)), e.dtype, err, mag, None,
                       mask_or(unsure, np.asarray(res.unsure[()])))
        arrays = np.broadcast_arrays(*[i.v.astype(np.int64) for i in idx])
        oob = None
        clipped = []
        for a, n in zip(arrays, shape):
            bad = (a < 0) | (a >= n)
            if bad.any():
                oob = mask_or(oob, bad)
            clipped.append(np.clip(a, 0, n - 1))
        key = tuple(clipped)
        v = res.value[key]
        if dt.is_float(e.dtype):
            v = v.astype(np.float64)
        err = None if res.err is None else res.err[key]
        mag = None if res.mag is None else res.mag[key]
        unsure = mask_or(unsure, res.unsure[key] if res.unsure.any() else None)
        fma = None
        if (isinstance(e.tensor.op, ComputeOp) and _may_be_product(e.tensor.op.body[0])
                and dt.is_float(e.dtype)):
            fma = ulp(v, e.dtype) / 2  # the stored product may be fused downstream
        return Val(v, e.dtype, err, mag, fma, unsure, oob)

    # ------------------------------------------------------------------ structure
    def visit_Cast(self, e: Cast) -> Val:
        x = self.visit(e.value)
        return cast(x, e.dtype)

    def visit_Select(self, e: Select) -> Val:
        c = self.visit(e.cond)
        t = self.visit(e.true_value)
        f = self.visit(e.false_value)
        cv = c.v.astype(bool)
        v = np.where(cv, t.v, f.v)
        err = None if t.err is None and f.err is None else np.where(cv, t.e(), f.e())
        mag = None
        if t.mag is not None or f.mag is not None:
            mag = np.where(cv, t.m(), f.m())
        fma = None
        if t.fma is not None or f.fma is not None:
            fma = np.where(cv, 0.0 if t.fma is None else t.fma, 0.0 if f.fma is None
                           else f.fma)

        def pick(a, b):
            if a is None and b is None:
                return None
            return np.where(cv, False if a is None else a, False if b is None else b)

        return Val(v, e.dtype, err, mag, fma, mask_or(pick(t.unsure, f.unsure), c.unsure),
                   mask_or(pick(t.oob, f.oob), c.oob))

    def visit_And(self, e: And) -> Val:
        a, b = self.visit(e.a), self.visit(e.b)
        return Val(a.v.astype(bool) & b.v.astype(bool), "bool", unsure=mask_or(a.unsure, b.unsure),
                   oob=mask_or(a.oob, b.oob))

    def visit_Or(self, e: Or) -> Val:
        a, b = self.visit(e.a), self.visit(e.b)
        return Val(a.v.astype(bool) | b.v.astype(bool), "bool", unsure=mask_or(a.unsure, b.unsure),
                   oob=mask_or(a.oob, b.oob))

    def visit_Not(self, e: Not) -> Val:
        a = self.visit(e.a)
        return Val(~a.v.astype(bool), "bool", unsure=a.unsure, oob=a.oob)

    def visit_Cmp(self, e: Cmp) -> Val:
        a, b = self.visit(e.a), self.visit(e.b)
        ops = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
               "gt": np.greater, "ge": np.greater_equal}
        with np.errstate(all="ignore"):
            v = ops[e.op](a.v, b.v)
            unsure = mask_or(a.unsure, b.unsure)
            if a.err is not None or b.err is not None:
                tol = a.e() + b.e()
                unsure = mask_or(unsure, (tol > 0) & (np.abs(a.v - b.v) <= tol))
        return Val(np.asarray(v), "bool", unsure=unsure, oob=mask_or(a.oob, b.oob))

    def visit_Binary(self, e: Binary) -> Val:
        a, b = self.visit(e.a), self.visit(e.b)
        out = (float_binary if dt.is_float(e.dtype) else int_binary)(e.op, a, b, e.dtype)
        out.oob = mask_or(a.oob, b.oob)
        out.unsure = mask_or(out.unsure, mask_or(a.unsure, b.unsure))
        return out

    def visit_Call(self, e: Call) -> Val:
        args = [self.visit(x) for x in e.args]
        out = call(e.name, args, e.dtype)
        for x in args:
            out.unsure = mask_or(out.unsure, x.unsure)
            out.oob = mask_or(out.oob, x.oob)
        return out

    def visit_Reduce(self, e: Reduce) -> Val:
        raise ReferenceError("reference: a reduction inside an expression")


# ---------------------------------------------------------------------------- reductions
def _combiner_op(red: Reduce) -> str | None:
    """``add``/``max``/``min`` when the combiner is that op of its two variables."""
    r = red.combiner.result
    lhs, rhs = red.combiner.lhs, red.combiner.rhs
    if isinstance(r, Binary) and r.op in ("add", "max", "min", "mul") and {
            id(r.a), id(r.b)} == {id(lhs), id(rhs)}:
        return r.op
    return None


def tuple_key(name: str, value_index: int) -> str:
    """The name :func:`evaluate` gives output ``value_index`` of a compute named ``name``
    (TVM's buffer names: ``R``, ``R.v1``, ...)."""
    return name if value_index == 0 else f"{name}.v{value_index}"


def arg_reduce(red: Reduce, idx: Val, src: Val, cond: Val | None, nred: int,
               shape: tuple, best: str | None = None) -> tuple:
    """An argmax/argmin tuple reduction (:data:`.spec.COMBINERS`: the best value, the
    smallest index among equal values) over the last ``nred`` axes of the grid ``shape``:
    ``(index Val, value Val)``. Unsure where a NaN is reduced or where values closer than
    their error bounds compete."""
    best = best or ("max" if red.combiner.name == "argmax" else "min")
    lead = shape[:len(shape) - nred]
    flat = lead + (-1,)
    live = (np.ones(shape, bool) if cond is None else
            np.broadcast_to(cond.v.astype(bool), shape)).reshape(flat)
    v = np.broadcast_to(src.v, shape).astype(np.float64).reshape(flat)
    ix = np.broadcast_to(idx.v, shape).astype(np.int64).reshape(flat)
    e = np.broadcast_to(src.e(), shape).reshape(flat)
    fill = -np.inf if best == "max" else np.inf
    with np.errstate(all="ignore"):
        vv = np.where(live, v, fill)
        m = np.nanmax(vv, axis=-1) if best == "max" else np.nanmin(vv, axis=-1)
        cand = live & (vv == m[..., None])
        big = 2147483647
        chosen = np.min(np.where(cand, ix, big), axis=-1)
        any_live = np.any(live, axis=-1)
        e_max = np.max(np.where(live, e, 0.0), axis=-1)
        near = live & (np.abs(vv - m[..., None]) <= e + e_max[..., None]) & (
            ix != chosen[..., None]) & (e + e_max[..., None] > 0)
        unsure = np.any(near | (live & np.isnan(v)), axis=-1)
    for part in (src, idx):
        if part.unsure is not None:
            unsure = unsure | np.any(np.broadcast_to(part.unsure, shape).reshape(flat) & live,
                                     axis=-1)
    oob = None
    for part in (src, idx, cond):
        if part is not None and part.oob is not None:
            oob = mask_or(oob, np.any(np.broadcast_to(part.oob, shape).reshape(flat),
                                      axis=-1))
    ident_v = float(red.combiner.identity[1].value)
    value = np.where(any_live, m, ident_v)
    dtype = red.combiner.result[1].dtype
    if not dt.is_float(dtype):
        value = np.where(any_live, value, 0).astype(np.int64)
        value = np.where(any_live, value, int(red.combiner.identity[1].value)).astype(
            storage_dtype(dtype))
    index = np.where(any_live, chosen, big).astype(red.combiner.result[0].dtype)
    err = np.where(any_live, e_max, 0.0) if dt.is_float(dtype) else None
    return (Val(index, red.combiner.result[0].dtype, unsure=unsure, oob=oob),
            Val(value, dtype, err, None, None, unsure, oob))


def _exact_sum(x, acc: str):
    """True where every partial sum of ``x`` over its last axis is exact in dtype ``acc``:
    all terms are multiples of ``2**-s`` and ``sum|x| * 2**s < 2**p`` for some ``s``."""
    p = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}[acc]
    ok = np.zeros(x.shape[:-1], bool)
    total = np.sum(np.abs(x), axis=-1)
    with np.errstate(all="ignore"):
        for s in (0, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 30):
            scaled = x * 2.0 ** s
            whole = np.all(scaled == np.round(scaled), axis=-1)
            ok |= whole & (total * 2.0 ** s < 2.0 ** p)
    return ok


def reduce(red: Reduce, src: Val, cond: Val | None, init: Val | None, nred: int,
           shape: tuple, acc: str | None = None) -> Val:
    """Reduce ``src`` (over the full grid ``shape``) over its last ``nred`` axes (a float
    sum in ``acc``, by default the project's accumulator of its dtype)."""
    axes = tuple(range(len(shape) - nred, len(shape)))
    op = _combiner_op(red)
    if op is None:
        raise ReferenceError(f"reference: combiner {red.combiner.name!r} is not one of "
                             f"sum/max/min")
    dtype = red.dtype
    if op == "mul" and dt.is_float(dtype):
        raise ReferenceError("reference: a float product reduction (no error bound)")
    v = np.broadcast_to(src.v, shape)
    live = np.ones(shape, bool) if cond is None else np.broadcast_to(
        cond.v.astype(bool), shape)
    unsure = oob = None
    if src.unsure is not None:
        unsure = np.any(np.broadcast_to(src.unsure, shape) & live, axis=axes)
    if src.oob is not None:
        oob = np.any(np.broadcast_to(src.oob, shape) & live, axis=axes)
    if cond is not None:
        if cond.unsure is not None:
            unsure = mask_or(unsure, np.any(np.broadcast_to(cond.unsure, shape), axis=axes))
        if cond.oob is not None:
            oob = mask_or(oob, np.any(np.broadcast_to(cond.oob, shape), axis=axes))
    identity = red.combiner.identity.value
    with np.errstate(all="ignore"):
        if not dt.is_float(dtype):
            if op == "mul":  # wraps: exact in any order
                flat = np.where(live, v, 1).astype(np.int64).reshape(
                    shape[:len(shape) - nred] + (-1,))
                r = np.ones(flat.shape[:-1], np.int64)
                for k in range(flat.shape[-1]):
                    r = wrap(r * flat[..., k], dtype).astype(np.int64)
            elif op == "add":
                wide = np.where(live, v, 0).astype(np.int64 if dt.bits(dtype) <= 32 else object)
                r = wrap(np.sum(wide, axis=axes), dtype)
            else:
                fill = np.array(identity).astype(storage_dtype(dtype))
                r = (np.min if op == "min" else np.max)(np.where(live, v, fill), axis=axes)
            out = Val(np.asarray(r).astype(storage_dtype(dtype)), dtype, unsure=unsure,
                      oob=oob)
            if init is not None:
                red_unsure = out.unsure
                out = int_binary(op, init, out, dtype)
                out.unsure = mask_or(mask_or(out.unsure, red_unsure), init.unsure)
                out.oob = mask_or(oob, init.oob)
            return out
        e = np.broadcast_to(src.e(), shape)
        mag = np.broadcast_to(src.m(), shape)
        if op == "add":
            acc = acc or ACCUMULATOR[dtype]
            x = np.where(live, v, 0.0)
            total = np.sum(x, axis=axes)
            n = np.sum(live, axis=axes)
            abs_sum = np.sum(np.abs(x), axis=axes)
            # the accumulation `acc + a * b` may be fused into one multiply-add
            fused = 0.0 if src.fma is None else np.broadcast_to(src.fma, shape)
            err = np.sum(np.where(live, e + fused, 0.0), axis=axes)
            if init is not None:
                total = total + init.v
                abs_sum = abs_sum + np.abs(init.v)
                n = n + 1
                err = err + init.e()
            exact = _exact_sum(x.reshape(x.shape[:len(shape) - nred] + (-1,)), acc)
            if init is not None:
                exact = exact & (init.e() == 0)
            # any order of accumulation in `acc` (and our own float64 sum) is within this
            order = np.where(exact | (n <= 1), 0.0,
                             (UNIT[acc] + UNIT["float64"]) * np.maximum(n - 1, 0) * abs_sum)
            r_acc = round_to(total, acc)
            err_acc = err + order
            out = rounded(r_acc, dtype, np.where(err_acc > 0, err_acc + ulp(r_acc, acc), 0.0),
                           np.sum(np.where(live, mag, 0.0), axis=axes) + (
                               0.0 if init is None else init.m()), unsure)
            out.oob = oob
            return out
        fill = -np.inf if op == "max" else np.inf
        base = np.where(live, v, fill)
        r = (np.max if op == "max" else np.min)(base, axis=axes)  # NaN propagates
        any_live = np.any(live, axis=axes)
        r = np.where(any_live, r, float(identity))
        err = np.max(np.where(live, e, 0.0), axis=axes) if src.err is not None else None
        out = Val(np.asarray(r, dtype=np.float64), dtype, err,
                  np.max(np.where(live, mag, 0.0), axis=axes), None, unsure, oob)
        if init is not None:
            out2 = float_binary(op, init, out, dtype)
            out2.unsure = mask_or(mask_or(out2.unsure, unsure), init.unsure)
            out2.oob = mask_or(oob, init.oob)
            return out2
        return out


# ---------------------------------------------------------------------------- driver
def _topo(outputs) -> list:
    order, seen = [], set()

    def visit(op):
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    for t in outputs:
        visit(t.op if isinstance(t, Tensor) else t)
    return order


def _grid(axes, ndim: int, first: int) -> dict:
    env = {}
    for k, iv in enumerate(axes):
        shape = [1] * ndim
        shape[first + k] = iv.dom.extent
        a = np.arange(iv.dom.min, iv.dom.min + iv.dom.extent, dtype=iv.var.dtype)
        env[iv.var] = Val(a.reshape(shape), iv.var.dtype)
    return env


def evaluate(outputs, inputs: dict) -> dict:
    """Evaluate the definitions of ``outputs`` on ``inputs``.

    Parameters
    ----------
    outputs : list of Tensor
        Tensors to compute (with every compute they read).
    inputs : dict
        Placeholder tensor (or its name) -> numpy array of its shape and dtype.

    Returns
    -------
    dict
        Tensor name -> :class:`Result`, for every tensor computed (inputs included).

    Raises
    ------
    ReferenceError
        For a read outside a tensor that the definition performs, a free scalar variable,
        or a combiner other than sum/max/min.
    """
    by_name = {(k if isinstance(k, str) else k.name): v for k, v in inputs.items()}
    ev = _Eval({})
    results = {}
    for op in _topo(outputs):
        if isinstance(op, PlaceholderOp):
            a = np.asarray(by_name[op.name])
            if op.dtype == "bfloat16" and a.dtype == np.uint16:  # bit patterns
                a = dt.bfloat16_to_float32(a)
            if dt.is_int4(op.dtype) and op.shape and a.shape == dt.packed_shape(op.shape):
                a = dt.unpack_int4(a, op.shape[-1], op.dtype)  # two elements per byte
            if a.shape != op.shape or a.dtype != np.dtype(storage_dtype(op.dtype)):
                raise ValueError(f"reference: input {op.name!r} has shape {a.shape} and dtype "
                                 f"{a.dtype}; expected {op.shape} {op.dtype}")
            res = Result(a, None, None, np.zeros(a.shape, bool))
        else:
            res = _compute(ev, op)
        res = res if isinstance(res, list) else [res]
        ev.tensors[id(op)] = res
        for k, r in enumerate(res):
            results[tuple_key(op.name, k)] = r
    return results


def _scan(ev: _Eval, op: ScanOp) -> list:
    """The states of a ``te.scan``, row by row: row ``t`` of the body reads rows before
    ``t`` of the scan's own outputs, computed by then."""
    shape = tuple(iv.dom.extent for iv in op.axis)
    ns = len(op.axis)
    parts = []
    for k in range(len(op.body)):
        d = op.output(k).dtype
        f = dt.is_float(d)
        parts.append(Result(np.zeros(shape, storage_dtype(d)), np.zeros(shape) if f else None,
                            np.zeros(shape) if f else None, np.zeros(shape, bool)))
    ev.tensors[id(op)] = parts
    row = (1,) + shape[1:]
    for t in range(shape[0]):
        ev.env = _grid(op.axis[1:], ns, 1)
        ev.env[op.axis[0].var] = Val(np.full((1,) * ns, t, op.axis[0].var.dtype),
                                     op.axis[0].var.dtype)
        for k, b in enumerate(op.body):
            r = _result(op, k, ev.visit(b), row)
            for mine, got in ((parts[k].value, r.value), (parts[k].err, r.err),
                              (parts[k].mag, r.mag), (parts[k].unsure, r.unsure)):
                if mine is not None:
                    mine[t] = got[0]
    return parts


def _compute(ev: _Eval, op: ComputeOp) -> list:
    """The outputs of ``op`` (one :class:`Result` each)."""
    if isinstance(op, ScanOp):
        return _scan(ev, op)
    body = op.body[0]
    shape = tuple(iv.dom.extent for iv in op.axis)
    ns = len(op.axis)
    if isinstance(body, Reduce) and len(op.body) == 2 and body.combiner.name in (
            "argmax", "argmin"):
        nr = len(body.axis)
        full = shape + tuple(iv.dom.extent for iv in body.axis)
        ev.env = {**_grid(op.axis, ns + nr, 0), **_grid(body.axis, ns + nr, ns)}
        idx = ev.visit(op.body[0].source)
        src = ev.visit(op.body[1].source)
        cond = ev.visit(body.condition) if body.condition is not None else None
        return [_result(op, k, val, shape) for k, val in
                enumerate(arg_reduce(body, idx, src, cond, nr, full))]
    if isinstance(body, Reduce) and isinstance(body.combiner, TupleCommReducer):
        return _tuple_reduce(ev, op, shape)
    if len(op.body) > 1:
        if isinstance(body, Reduce):
            raise ReferenceError(f"reference: tuple reduction {body.combiner.name!r}")
        ev.env = _grid(op.axis, ns, 0)
        return [_result(op, k, ev.visit(b), shape) for k, b in enumerate(op.body)]
    if isinstance(body, Reduce):
        nr = len(body.axis)
        full = shape + tuple(iv.dom.extent for iv in body.axis)
        ev.env = {**_grid(op.axis, ns + nr, 0), **_grid(body.axis, ns + nr, ns)}
        src = ev.visit(body.source)
        cond = ev.visit(body.condition) if body.condition is not None else None
        init = None
        if body.init is not None:
            ev.env = _grid(op.axis, ns, 0)
            init = ev.visit(body.init)
        val = reduce(body, src, cond, init, nr, full)
    else:
        ev.env = _grid(op.axis, ns, 0)
        val = ev.visit(body)
    return _result(op, 0, val, shape)


@dataclass(frozen=True)
class _Element:
    """Element ``k`` of a tuple combiner seen as a reduction of its own (what
    :func:`reduce` reads of a :class:`Reduce`: ``combiner.result/lhs/rhs/identity``,
    ``dtype``)."""

    combiner: CommReducer
    dtype: str


def _tuple_reduce(ev: _Eval, op: ComputeOp, shape: tuple) -> list:
    """The outputs of a tuple reduction whose combiner combines each element on its own
    (``x[k] + y[k]``, ``max``, ``min``, ``*``), except for an argmax/argmin pair of elements
    0 and 1 in a combiner named ``tup_argmax...``/``tup_argmin...`` (:func:`.spec.
    combiner_code`); each element in its own dtype (a float sum accumulates in it: te's
    rule for tuple reductions, :func:`polytile.te.reduction.accumulation_dtype`)."""
    body = op.body[0]
    comb = body.combiner
    ns, nr = len(op.axis), len(body.axis)
    full = shape + tuple(iv.dom.extent for iv in body.axis)
    ev.env = {**_grid(op.axis, ns + nr, 0), **_grid(body.axis, ns + nr, ns)}
    cond = ev.visit(body.condition) if body.condition is not None else None
    vals: list = [None] * len(op.body)
    pair = next((b for b in ("argmax", "argmin") if comb.name.startswith(f"tup_{b}")), None)
    inits = [None] * len(op.body)
    if body.init is not None:
        if pair is not None:
            raise ReferenceError(f"reference: tuple reduction {comb.name!r} with init")
        ev.env = _grid(op.axis, ns, 0)
        inits = [ev.visit(b.init) for b in op.body]
        ev.env = {**_grid(op.axis, ns + nr, 0), **_grid(body.axis, ns + nr, ns)}
    if pair is not None:
        idx, src = ev.visit(op.body[0].source), ev.visit(op.body[1].source)
        vals[0], vals[1] = arg_reduce(body, idx, src, cond, nr, full, pair[3:])
    for k, b in enumerate(op.body):
        if vals[k] is not None:
            continue
        elem = _Element(CommReducer(comb.name, comb.lhs[k], comb.rhs[k], comb.result[k],
                                    comb.identity[k]), b.dtype)
        if _combiner_op(elem) is None:   # (which also says it reads only its own element)
            raise ReferenceError(f"reference: element {k} of tuple combiner {comb.name!r} "
                                 f"is not a sum/max/min/product of its own element")
        vals[k] = reduce(elem, ev.visit(b.source), cond, inits[k], nr, full, acc=b.dtype)
    return [_result(op, k, v, shape) for k, v in enumerate(vals)]


def _result(op: ComputeOp, k: int, val: Val, shape: tuple) -> Result:
    """Output ``k`` of ``op`` from its evaluated value."""
    if val.oob is not None and np.any(val.oob):
        where = np.argwhere(np.broadcast_to(val.oob, shape))[0]
        raise ReferenceError(f"reference: stage {op.name!r} reads outside a tensor at "
                             f"{tuple(int(x) for x in where)}")
    value = np.broadcast_to(val.v, shape)
    dtype = op.output(k).dtype
    with np.errstate(all="ignore"):
        value = value.astype(storage_dtype(dtype))
    err = mag = None
    if dt.is_float(dtype):
        err = np.array(np.broadcast_to(val.e(), shape), dtype=np.float64)
        mag = np.array(np.broadcast_to(val.m(), shape), dtype=np.float64)
    unsure = np.zeros(shape, bool) if val.unsure is None else np.array(
        np.broadcast_to(val.unsure, shape))
    return Result(np.ascontiguousarray(value), err, mag, unsure)


def tolerance(res: Result, dtype: str, relaxed: bool = False) -> np.ndarray:
    """Allowed ``|out - ref|`` per element: the error bound plus one ulp of the result plus
    the smallest normal number (math functions may flush subnormal results to zero)
    (``relaxed``: plus ``8 u * mag`` for targets that keep float16 intermediates in float32)."""
    tol = res.err + ulp(res.value.astype(np.float64), dtype) + float(finfo(dtype).tiny)
    if relaxed:
        tol = tol + 8 * UNIT[dtype] * res.mag
    return tol


def _may_be_product(e) -> bool:
    """Can the value of ``e`` be a product (a multiplication at its top, or in a branch of
    ``if_then_else``)? Once inlined, its consumer may fuse it into a multiply-add (fuzz
    seed llvm 4416: ``a - (x if c else a * a)``)."""
    if isinstance(e, Binary):
        return e.op == "mul"
    if isinstance(e, Select):
        return _may_be_product(e.true_value) or _may_be_product(e.false_value)
    return False
