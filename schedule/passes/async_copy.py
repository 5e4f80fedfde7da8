"""Asynchronous global -> shared copies (PTX ``cp.async``, sm_80+) in the loop IR.

Meaning: a vectorized ``For`` whose ``pragmas`` hold :data:`~..kinds.ASYNC_COPY` copies
its 16 bytes asynchronously: the source is read when the loop runs, the destination is
written at some time before the issuing thread's next ``cp.async.wait_group(n)`` that
covers it. ``Evaluate(ExternCall("cp.async.commit_group"))`` closes the thread's current
group of copies; ``Evaluate(ExternCall("cp.async.wait_group", n))`` waits until at most
``n`` of its committed groups are still in flight (PTX ISA 9.7.9.25, "Data Movement and
Conversion Instructions: cp.async"). The reference interpreter runs exactly this (writes
land at the wait), so a missing or wrong wait shows as wrong values; the C printer emits
one helper per instruction, an ordinary 16-byte copy below sm_80.

:func:`async_copies` (a loop pass) turns every eligible staging copy (see
:func:`async_copy_refusal`) into an asynchronous one and, for those no software pipeline
manages, waits for them (``commit_group``; ``wait_group(0)``) before the next barrier.
"""

from __future__ import annotations

import dataclasses

from polytile.te import dtype as dt
from polytile.te.expr import Binary, Cast, Const, Expr, Select, Var
from polytile.te.visitor import ExprMutator, collect, free_vars, substitute

from ..kinds import ASYNC_COPY, LoopKind
from ..loop_ir import (Allocate, Evaluate, ExternCall, For, IfThenElse, KernelLaunch, LetStmt,
                       Load, Seq, Stmt, StmtMutator, Store, Sync, seq, walk_stmts)

#: Bytes one ``cp.async.cg`` copies (the ``.cg`` form, which bypasses L1, takes 16 only).
ASYNC_BYTES = 16


def commit_group() -> Stmt:
    """``cp.async.commit_group``: close this thread's current group of async copies."""
    return Evaluate(ExternCall("void", "cp.async.commit_group", ()))


def wait_group(n: int) -> Stmt:
    """``cp.async.wait_group n``: wait until at most ``n`` committed groups are pending."""
    return Evaluate(ExternCall("void", "cp.async.wait_group", (Const("int32", n),)))


def is_async_op(s: Stmt, name: str | None = None) -> bool:
    """Is ``s`` a ``cp.async.commit_group``/``wait_group`` statement (``name`` one of them)?"""
    return (isinstance(s, Evaluate) and isinstance(s.value, ExternCall)
            and s.value.name.startswith("cp.async.")
            and (name is None or s.value.name == f"cp.async.{name}"))


# ------------------------------------------------------------------ affine alignment
def linear_terms(e: Expr) -> tuple[dict, int] | None:
    """``({term: coefficient}, constant)``: ``e`` as an integer sum of multiples of terms;
    a term is a variable or any other sub-expression (kept whole)."""
    if isinstance(e, Const) and dt.is_int(e.dtype):
        return {}, int(e.value)
    if isinstance(e, Var):
        return {e: 1}, 0
    if isinstance(e, Cast) and dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
        return linear_terms(e.value)
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        a, b = linear_terms(e.a), linear_terms(e.b)
        if a is None or b is None:
            return None
        sign = 1 if e.op == "add" else -1
        terms = dict(a[0])
        for v, k in b[0].items():
            terms[v] = terms.get(v, 0) + sign * k
        return terms, a[1] + sign * b[1]
    if isinstance(e, Binary) and e.op == "mul":
        for c, other in ((e.a, e.b), (e.b, e.a)):
            if isinstance(c, Const) and dt.is_int(c.dtype):
                lo = linear_terms(other)
                if lo is None:
                    return None
                return {v: k * c.value for v, k in lo[0].items()}, lo[1] * c.value
    return {e: 1}, 0


def contiguous_aligned(index: Expr, var: Var, lanes: int) -> bool:
    """Is the flat element offset ``index`` equal to ``base + var`` with ``base`` provably
    a multiple of ``lanes`` (every other term's coefficient and the constant are)?"""
    lin = linear_terms(index)
    if lin is None:
        return False
    terms, const = lin
    if terms.get(var, 0) != 1:
        # the lane inside a select on a lane-free condition (the AST generator's case
        # split of a grouped block index): aligned where both cases are
        sel = next((x for x in collect(index, Select) if not any(
            v is var for v in free_vars(x.cond))), None)
        return sel is not None and all(contiguous_aligned(
            _Replace(sel, branch).visit(index), var, lanes)
            for branch in (sel.true_value, sel.false_value))
    return _multiple(terms, const, var, lanes)


class _Replace(ExprMutator):
    """``e`` with the node ``old`` (by identity) replaced by ``new``."""

    def __init__(self, old: Expr, new: Expr):
        self.old, self.new = old, new

    def visit(self, e):
        return self.new if e is self.old else super().visit(e)


def _multiple(terms: dict, const: int, var: Var, lanes: int, depth: int = 0) -> bool:
    """Is ``sum(k * t) + const`` (``var``'s own term left out) provably a multiple of
    ``lanes`` and free of ``var``? Besides terms whose coefficient is one, two patterns
    of grouped block indices (``bj = bx // g`` written by the AST generator as
    ``k * bx - k * (bx % g)``, or as a ``select`` over the few values of ``bj``):
    ``k * x - k * mod(x, g)`` is ``k * g * div(x, g)`` (true of floor and truncated
    division alike), and ``k * select(c, a, b)`` is a multiple where ``k * a`` and
    ``k * b`` are (``c`` free of ``var``)."""
    if const % lanes:
        return False
    # a term whose coefficient cancelled (one node added and subtracted) is zero
    rest = {t: k for t, k in terms.items() if k and t is not var}
    for t, k in list(rest.items()):
        if not (isinstance(t, Binary) and t.op in ("floormod", "truncmod")
                and isinstance(t.b, Const) and t in rest):
            continue
        x = t.a
        while isinstance(x, Cast) and dt.is_int(x.dtype) and dt.is_int(x.value.dtype):
            x = x.value     # linear_terms keys the term without its integer casts
        # k * g * div(x, g) is a multiple of lanes, but lane-free only where x is
        if (rest.get(x, 0) == -k and (k * int(t.b.value)) % lanes == 0
                and not any(y is var for y in free_vars(x))):
            del rest[t], rest[x]
    for t, k in rest.items():
        if any(x is var for x in free_vars(t)):
            return False
        if k % lanes == 0:
            continue
        if isinstance(t, Select) and depth < 4:
            for branch in (t.true_value, t.false_value):
                lin = linear_terms(branch)
                if lin is None or not _multiple({u: c * k for u, c in lin[0].items()},
                                                lin[1] * k, var, lanes, depth + 1):
                    return False
            continue
        return False
    return True


def _row_major(buf, indices) -> Expr | None:
    """The flat element offset of ``buf[indices]``; None for a symbolic shape."""
    off: Expr = Const("int64", 0)
    stride = 1
    for ext, ix in zip(reversed(buf.shape), reversed(indices)):
        ix = ix if ix.dtype == "int64" else Cast("int64", ix)
        off = Binary("int64", "add", Binary("int64", "mul", ix, Const("int64", stride)), off)
        e = ext.value if isinstance(ext, Const) else ext
        if not isinstance(e, int):
            return None
        stride *= e
    return off


class _LaneFree(ExprMutator):
    """``floordiv(base + lane, k)`` -> ``floordiv(base, k)`` where ``base`` is provably a
    multiple of ``lanes`` and ``k`` one too: every lane of an aligned vector is in the
    same ``k``-block (the channel test ``c // 8 < CI // 8`` of a padded gather)."""

    def __init__(self, lane: Var, lanes: int):
        self.lane, self.lanes = lane, lanes

    def visit_Binary(self, e: Binary):
        if e.op == "floordiv" and isinstance(e.b, Const) and dt.is_int(e.b.dtype) \
                and e.b.value % self.lanes == 0 and contiguous_aligned(e.a, self.lane,
                                                                        self.lanes):
            return Binary(e.dtype, e.op, substitute(e.a, {self.lane: Const(self.lane.dtype,
                                                                         0)}), e.b)
        return self.generic_visit(e)


def zero_fill(value: Expr, lane: Var, lanes: int) -> tuple[Load, Expr | None] | None:
    """``(load, fill)`` of a copied value: ``src[..]`` (``fill`` None) or a zero-filled
    load ``select(fill, src[..], 0)`` whose condition is the same for all ``lanes`` lanes
    (the padding of an im2col gather: the whole vector is either read or zero; ``fill`` is
    returned without the lane variable); else None."""
    if isinstance(value, Load):
        return value, None
    if isinstance(value, Select) and isinstance(value.true_value, Load) \
            and isinstance(value.false_value, Const) and value.false_value.value == 0:
        cond = value.cond
        if any(x is lane for x in free_vars(cond)):
            cond = _LaneFree(lane, lanes).visit(cond)
        if not any(x is lane for x in free_vars(cond)):
            return value.true_value, cond
    return None


def copy_parts(s: For) -> tuple[Store, Expr | None, Load, Expr | None] | None:
    """``(store, guard, load, fill)`` of a vectorized copy loop ``dst[..] = src[..]``
    (possibly under a ``guard`` that does not depend on the lane), or of a zero-filled
    copy ``dst[..] = select(fill, src[..], 0)`` with ``fill`` independent of the lane
    (:func:`zero_fill`; ``fill`` None for a plain copy); None for any other loop."""
    if s.kind != LoopKind.VECTORIZED:
        return None
    st, guard = s.body, None
    if isinstance(st, IfThenElse) and st.else_case is None and not any(
            x is s.var for x in free_vars(st.cond)):
        st, guard = st.then_case, st.cond
    if not isinstance(st, Store):
        return None
    if not isinstance(s.extent, Const):
        return None
    src = zero_fill(st.value, s.var, int(s.extent.value))
    if src is None:
        return None
    return st, guard, src[0], src[1]


def async_copy_refusal(s: For) -> str | None:
    """Why vectorized loop ``s`` cannot be one ``cp.async`` of 16 bytes (None: it can).

    It can when it copies ``lanes`` elements of one dtype (``lanes * bytes == 16``) from a
    buffer that is not ``shared``/``local`` into a ``shared`` one, both flat offsets
    provably ``base + lane`` with ``base`` a multiple of ``lanes`` (buffers start
    16-byte aligned). A zero-filled copy (``select(fill, src, 0)``, ``fill`` the same for
    every lane) is one too: PTX's ``src-size`` operand, 16 where ``fill`` holds, else 0
    (nothing read, 16 zero bytes written)."""
    parts = copy_parts(s)
    lane_guard = False
    if parts is None and s.kind == LoopKind.VECTORIZED and isinstance(s.body, IfThenElse) \
            and s.body.else_case is None:
        # a guard that depends on the lane: a vector cut by the edge of the tensor
        inner = s.body.then_case
        if isinstance(inner, Store) and isinstance(inner.value, Load):
            parts, lane_guard = (inner, s.body.cond, inner.value, None), True
    if parts is None:
        return ("it is not a vectorized copy dst[...] = src[...] (nor a zero-filled one, "
                "dst[...] = select(c, src[...], 0) with c the same for every lane)")
    st, _, ld, _ = parts
    if st.buffer.scope != "shared" or ld.buffer.scope in ("shared", "local"):
        return (f"it copies {ld.buffer.name!r} ({ld.buffer.scope}) into {st.buffer.name!r} "
                f"({st.buffer.scope}), not global into shared memory")
    if not (isinstance(s.extent, Const) and isinstance(s.min, Const) and s.min.value == 0
            and s.step == 1):
        return "its extent is not a constant"
    if dt.is_int4(st.buffer.dtype):
        return f"it copies {st.buffer.dtype} elements (packed two per byte, stored one by one)"
    lanes = int(s.extent.value)
    nbytes = dt.nbytes(st.buffer.dtype)
    if ld.buffer.dtype != st.buffer.dtype or lanes * nbytes != ASYNC_BYTES:
        return (f"it copies {lanes} lanes of {nbytes} bytes ({lanes * nbytes} bytes), not "
                f"{ASYNC_BYTES}")
    for what, buf, idx in (("shared", st.buffer, st.indices), ("global", ld.buffer, ld.indices)):
        flat = _row_major(buf, idx)
        if flat is None or not contiguous_aligned(flat, s.var, lanes):
            return (f"its {what} address {buf.name}[{', '.join(map(str, idx))}] is not "
                    f"provably 16-byte aligned (a multiple of {lanes} elements plus the lane)")
    if lane_guard:
        return (f"its guard {s.body.cond} depends on the lane (a vector cut by the edge of "
                "the tensor)")
    return None


def mark_async(s: For) -> For:
    """``s`` with the :data:`ASYNC_COPY` pragma."""
    return For(s.var, s.min, s.extent, s.kind, s.body, s.step, s.pragmas + (ASYNC_COPY,))


def is_async_copy(s: Stmt) -> bool:
    return isinstance(s, For) and ASYNC_COPY in s.pragmas


# ------------------------------------------------------------------------- the pass
class _Convert(StmtMutator):
    def __init__(self):
        self.new: set = set()

    def visit_For(self, s: For):
        if s.kind == LoopKind.VECTORIZED and ASYNC_COPY not in s.pragmas \
                and async_copy_refusal(s) is None:
            out = mark_async(s)
            self.new.add(id(out))
            return out
        return self.generic_visit(s)


def _drain() -> tuple:
    return (commit_group(), wait_group(0))


def _waits(s: Stmt, new: set) -> tuple[Stmt, bool]:
    """``s`` with waits for the copies of ``new``; True when some are still in flight at
    its end (the caller waits before its next barrier)."""
    if isinstance(s, For) and id(s) in new:
        return s, True
    if isinstance(s, Seq):
        out, pending = [], False
        for x in s.stmts:
            if isinstance(x, Sync) and pending:
                out += _drain()
                pending = False
            nx, p = _waits(x, new)
            out.append(nx)
            pending |= p
        return seq(*out), pending
    if isinstance(s, (For, LetStmt, Allocate, IfThenElse, KernelLaunch)):
        if isinstance(s, IfThenElse):
            a, pa = _waits(s.then_case, new)
            b, pb = (None, False) if s.else_case is None else _waits(s.else_case, new)
            return IfThenElse(s.cond, a, b), pa or pb
        body, p = _waits(s.body, new)
        if p and (isinstance(s, KernelLaunch) or (
                isinstance(s, For) and any(isinstance(x, Sync) for x in walk_stmts(body)))):
            # copies after the last barrier of a loop body would still be in flight at the
            # next iteration's barriers
            body, p = seq(body, *_drain()), False
        return dataclasses.replace(s, body=body), p
    return s, False


def async_copies(stmt: Stmt) -> Stmt:
    """Vectorized 16-byte copies from global into shared memory become ``cp.async``
    (:func:`async_copy_refusal` says which qualify; the others stay ordinary vector
    copies); those outside a software pipeline are committed and waited for
    (``wait_group(0)``) before the next barrier, so every copy of a staging step is in
    flight at once. Assumes: barriers are ``Sync`` statements of the kernel body (the
    kernel's top level is drained at its end). Helps: the copies skip registers and L1,
    and the thread issues all of them before waiting."""
    conv = _Convert()
    out = conv.visit(stmt)
    if not conv.new:
        return out
    out, pending = _waits(out, conv.new)
    return seq(out, *_drain()) if pending else out
