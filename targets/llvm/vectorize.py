"""Vectorized loops: widening a loop body to ``<N x T>`` LLVM vectors.

A ``For`` of kind ``vectorized`` has a constant extent and no inner loop (lowering
guarantees both; :class:`~polytile.errors.InternalError` otherwise). Its ``N = ceil(extent /
step)`` iterations become SIMD lanes, at most one native register's worth at a time
(``native_lanes``: the target's register width over the widest element the body loads or
stores, e.g. 16 float32 with AVX-512): a longer loop is strip-mined into a loop over
chunks of that many lanes, then one narrower vector for the remainder, so that code size
and compile time do not grow with ``N``. Each expression is evaluated to a *lane value*,
one of

* **uniform**: one scalar shared by all lanes (splatted only when a vector is needed);
* **ramp**: ``base + lane * stride`` with a scalar ``base`` and a constant integer
  ``stride`` (the loop variable, and index arithmetic affine in it);
* **vector**: a general ``<N x T>`` value.

Memory accesses follow the index: a uniform index (or a ramp of stride 0) is one scalar
access, a ramp of stride 1 is one vector load/store (alignment: the element size), and
anything else a ``llvm.masked.gather``/``llvm.masked.scatter`` with an all-true mask (the
scatter writes lanes in order, so the last lane wins as in the serial loop). A store of a
varying value to a uniform address stores the last lane.

Statements run lane-parallel one after the other, which equals the serial loop for the
loops lowering allows to vectorize (no dependence carried by the loop). Conditions that are
uniform keep their branches (lazy ``Select`` operands, ``IfThenElse``). When the body holds
something that cannot be widened safely (a non-uniform ``IfThenElse``, an ``Allocate``, a
``Select``/``And``/``Or`` whose condition varies across lanes and whose operands may trap),
each chunk is emitted unrolled as scalar code instead: correctness first, a chunk is
small. Conceptually this is Halide's ``VectorizeLoops`` (PLDI 2013) / TVM's
``VectorizeLoop`` with the fallback of TVM's ``scalarize``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import llvmlite.ir as ir

from polytile.errors import InternalError, format_error
from polytile.schedule.intdiv import floordiv_expr, floormod_expr
from polytile.schedule.passes.loops import masked_extent
from polytile.schedule.loop_ir import (AccessPtr, Allocate, Assert, Evaluate, ExternCall, For,
                                       IfThenElse, LetStmt, Load, Seq, Stmt, StmtFunctor, Store,
                                       stmt_exprs, walk_stmts)
from polytile.te import dtype as dt
from polytile.te.expr import (And, Binary, Call, Cast, Cmp, Const, Expr, Not, Or, Select,
                              Var, child_fields)
from polytile.te.visitor import collect

from . import intrinsics as llx
from .analysis import depends_on, has_inner_for, traps_after, varying_vars
from .intrinsics import I1, I8, I32, I64

if TYPE_CHECKING:
    from .codegen import CodeGen  # a type hint only: codegen.py imports this module


@dataclass(frozen=True, slots=True)
class LaneValue:
    """A value of the widened body: ``kind`` is ``"uniform"`` (``value`` is a scalar),
    ``"ramp"`` (``value`` is the scalar base, ``stride`` a Python int) or ``"vector"``."""

    kind: str
    value: ir.Value
    dtype: str
    stride: int = 0


def _u(v, dtype):
    return LaneValue("uniform", v, dtype)


def _vec(v, dtype):
    return LaneValue("vector", v, dtype)


def emit_vectorized(cg: CodeGen, s: For) -> None:
    """Emit the vectorized loop ``s`` at the current position of ``cg`` (see module doc).

    Raises
    ------
    InternalError
        If the extent is not a constant or the body contains a loop.
    """
    if masked_extent(s) is not None:
        _emit_masked(cg, s)
        return
    if not isinstance(s.extent, Const):
        raise InternalError(format_error(
            "codegen_llvm", f"vectorized loop {s.var.name!r} has the non-constant extent "
            f"{s.extent}", "expected a constant extent (lowering splits vectorized loops by a "
            "constant)"))
    if has_inner_for(s.body):
        raise InternalError(format_error(
            "codegen_llvm", f"vectorized loop {s.var.name!r} contains another loop",
            "expected an innermost loop (lowering only vectorizes innermost loops)"))
    lanes = max(0, -(-int(s.extent.value) // s.step))
    if lanes == 0:
        return
    lo = cg.index(s.min)
    widen = can_widen(s)
    chunk = native_lanes(cg.target, s.body)
    if lanes <= chunk:
        _emit_lanes(cg, s, lo, lanes, widen)
        return
    # strip-mining: a loop over chunks of one native vector, then the remaining lanes
    full = lanes // chunk * chunk
    end = cg.b.add(lo, I64(full * s.step))
    cg.loop(lo, end, chunk * s.step, f"{s.var.name}.vec",
            lambda base: _emit_lanes(cg, s, base, chunk, widen))
    if lanes > full:
        _emit_lanes(cg, s, end, lanes - full, widen)


def _emit_masked(cg: CodeGen, s: For) -> None:
    """A ragged vector: ``s`` of extent ``min(C, X)`` runs as ``C`` lanes (in chunks of a
    native vector) of which those below ``X`` are active: loads and stores of varying
    addresses are masked (``llvm.masked.load/store/gather/scatter``), so inactive lanes
    touch no memory. Bodies that a mask does not cover (see :func:`can_mask`) run as a
    serial loop."""
    c, x = masked_extent(s)
    if has_inner_for(s.body):
        raise InternalError(format_error(
            "codegen_llvm", f"vectorized loop {s.var.name!r} contains another loop",
            "expected an innermost loop (lowering only vectorizes innermost loops)"))
    b = cg.b
    lo = cg.index(s.min)
    n = b.select(b.icmp_signed("<", cg.index(x), I64(c)), cg.index(x), I64(c))
    if not (can_widen(s) and can_mask(s)):
        cg.loop(lo, b.add(lo, n), 1, s.var.name,
                lambda iv: cg.let(s.var, iv, lambda: cg.stmt(s.body)))
        return
    chunk = native_lanes(cg.target, s.body)
    with b.if_then(b.icmp_signed(">", n, I64(0))):
        for k0 in range(0, c, chunk):
            w = min(chunk, c - k0)
            if k0:
                # chunks past the active lanes touch no memory but still cost their
                # instructions: skip them
                with b.if_then(b.icmp_signed(">", n, I64(k0))):
                    _emit_chunk(cg, s, lo, n, k0, w)
            else:
                _emit_chunk(cg, s, lo, n, k0, w)


def _emit_chunk(cg: CodeGen, s: For, lo: ir.Value, n: ir.Value, k0: int, w: int) -> None:
    b = cg.b
    lanes = ir.Constant(ir.VectorType(I64, w), [I64(k0 + k) for k in range(w)])
    mask = b.icmp_signed("<", lanes, llx.splat(b, n, w))
    _Widener(cg, s.var, b.add(lo, I64(k0)), 1, w, mask).stmt(s.body)


def can_mask(s: For) -> bool:
    """True when inactive lanes of the widened body of ``s`` have no effect: no store to
    an address that is the same for all lanes (it would store the last lane, active or
    not) and no integer division by a varying value (an inactive lane's divisor may be
    zero)."""
    vs = varying_vars(s.var, s.body)
    for x in walk_stmts(s.body):
        if isinstance(x, Store) and not any(depends_on(i, vs) for i in x.indices):
            return False
        for e in stmt_exprs(x):
            stack = [e]
            while stack:
                y = stack.pop()
                if (isinstance(y, Binary) and y.op in ("div", "mod", "floordiv", "floormod")
                        and not dt.is_float(y.dtype) and depends_on(y.b, vs)):
                    return False
                for f in child_fields(y):
                    v = getattr(y, f)
                    stack.extend(z for z in (v if isinstance(v, tuple) else (v,))
                                 if isinstance(z, Expr))
    return True


def native_lanes(target, body: Stmt) -> int:
    """Lanes of one SIMD register of ``target`` for the widest element that ``body``
    loads or stores (4 bytes when it accesses no memory)."""
    widest = 0
    for x in walk_stmts(body):
        if isinstance(x, Store):
            widest = max(widest, dt.nbytes(x.buffer.dtype))
        for e in stmt_exprs(x):
            for ld in _loads(e):
                widest = max(widest, dt.nbytes(ld.buffer.dtype))
    return target.vector_lanes(widest or 4)


def _loads(e: Expr) -> list:
    out, stack = [], [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Load):
            out.append(x)
        for f in child_fields(x):
            v = getattr(x, f)
            stack.extend(y for y in (v if isinstance(v, tuple) else (v,)) if isinstance(y, Expr))
    return out


def _emit_lanes(cg: CodeGen, s: For, base: ir.Value, lanes: int, widen: bool) -> None:
    """Iterations ``base, base + step, ...`` (``lanes`` of them) of ``s``: one vector
    when ``widen``, else scalar copies of the body."""
    if lanes == 1 or not widen:
        for k in range(lanes):
            iv = cg.b.add(base, I64(k * s.step), name=f"{s.var.name}.{k}")
            cg.let(s.var, iv, lambda: cg.stmt(s.body))
        return
    _Widener(cg, s.var, base, s.step, lanes).stmt(s.body)


def can_widen(s: For) -> bool:
    """True when the body of vectorized loop ``s`` can be widened safely (see module doc)."""
    vs = varying_vars(s.var, s.body)
    for x in walk_stmts(s.body):
        if isinstance(x, (Allocate, Assert)):
            return False
        if isinstance(x, IfThenElse) and depends_on(x.cond, vs):
            return False
        for e in stmt_exprs(x):
            if not _lazy_ok(e, vs):
                return False
            # a C function with side effects (or taking pointers) runs in the serial
            # order of the loop: scalar code
            for c in collect(e, ExternCall):
                if c.kind not in ("pure_extern", "llvm_intrin") or c.dtype == "void" or any(
                        isinstance(a, AccessPtr) for a in c.args):
                    return False
    return True


def _lazy_ok(e: Expr, vs: set) -> bool:
    """False when ``e`` holds a lazy node with a varying condition and trapping operands."""
    stack, seen = [e], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Select):
            cond, ops = x.cond, (x.true_value, x.false_value)
        elif isinstance(x, (And, Or)):
            cond, ops = x.a, (x.b,)
        else:
            cond, ops = None, ()
        if cond is not None and depends_on(cond, vs):
            if traps_after(cond, *ops):
                return False
        for f in child_fields(x):
            v = getattr(x, f)
            stack.extend(y for y in (v if isinstance(v, tuple) else (v,)) if isinstance(y, Expr))
    return True


class _Widener(StmtFunctor):
    def __init__(self, cg: CodeGen, var: Var, lo: ir.Value, step: int, lanes: int,
                 mask: ir.Value | None = None):
        self.cg, self.var, self.lanes, self.mask = cg, var, lanes, mask
        self.ramp_var = LaneValue("ramp", lo, "int64", step)
        self.lets: dict = {}

    @property
    def b(self) -> ir.IRBuilder:
        return self.cg.b

    # -------------------------------------------------------------- lane values
    def vec(self, x: LaneValue) -> ir.Value:
        """Materialize ``x`` as a ``<N x T>`` vector."""
        if x.kind == "vector":
            return x.value
        sv = llx.splat(self.b, x.value, self.lanes)
        if x.kind == "uniform":
            return sv
        offs = llx.const(x.dtype, 0, self.lanes)
        offs = ir.Constant(offs.type, [llx.const(x.dtype, k * x.stride)
                                       for k in range(self.lanes)])
        return self.b.add(sv, offs)

    def lane(self, x: LaneValue, k: int) -> ir.Value:
        """The scalar value of lane ``k`` of ``x``."""
        if x.kind == "uniform":
            return x.value
        if x.kind == "ramp":
            return self.b.add(x.value, llx.const(x.dtype, k * x.stride))
        return self.b.extract_element(x.value, I32(k))

    # -------------------------------------------------------------- statements
    def stmt(self, s: Stmt) -> None:
        self.visit(s)

    def visit_Seq(self, s: Seq) -> None:
        for x in s.stmts:
            self.visit(x)

    def visit_LetStmt(self, s: LetStmt) -> None:
        old = self.lets.get(s.var)
        self.lets[s.var] = self.cast(self.ev(s.value), s.var.dtype)
        self.visit(s.body)
        if old is None:
            del self.lets[s.var]
        else:
            self.lets[s.var] = old

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        c = self.ev(s.cond)  # uniform: checked by can_widen
        if s.else_case is None:
            with self.b.if_then(c.value):
                self.visit(s.then_case)
        else:
            with self.b.if_else(c.value) as (then, other):
                with then:
                    self.visit(s.then_case)
                with other:
                    self.visit(s.else_case)

    def visit_Evaluate(self, s: Evaluate) -> None:
        pass

    def generic_visit(self, s, *args) -> None:
        # For and Allocate are excluded by emit_vectorized/can_widen
        raise InternalError(format_error("codegen_llvm", f"cannot widen {type(s).__name__}",
                                         "expected a checked loop body"))

    def visit_Store(self, s: Store) -> None:
        buf = s.buffer
        cg, b = self.cg, self.b
        if len(s.indices) != 1:
            cg.element_ptr(buf, s.indices)  # raises the contract error
        idx, val = self.ev(s.indices[0]), self.ev(s.value)
        if s.value.dtype != buf.dtype:
            val = self.cast(val, buf.dtype)
        base = cg.buffer_ptr(buf)
        align = dt.nbytes(buf.dtype)
        mem = lambda v: b.zext(v, llx.mem_type("bool", llx.lanes_of(v))) \
            if buf.dtype == "bool" else v  # noqa: E731
        if idx.kind == "uniform" or (idx.kind == "ramp" and idx.stride == 0):
            v = val.value if val.kind == "uniform" else self.lane(val, self.lanes - 1)
            b.store(mem(v), b.gep(base, [self._i64(idx, idx.value)], inbounds=True),
                    align=align)
        elif idx.kind == "ramp" and idx.stride == 1 and self.mask is not None:
            data = mem(self.vec(val))
            p = b.bitcast(b.gep(base, [self._i64(idx, idx.value)], inbounds=True),
                          data.type.as_pointer())
            fn = llx.declare(cg.module, f"llvm.masked.store.{llx._suffix(data.type)}."
                             f"{llx._suffix(p.type)}", llx.VOID,
                             [data.type, p.type, I32, self.mask.type])
            b.call(fn, [data, p, I32(align), self.mask])
        elif idx.kind == "ramp" and idx.stride == 1:
            p = b.gep(base, [self._i64(idx, idx.value)], inbounds=True)
            cg.vector_store(mem(self.vec(val)), p, align)
        else:
            ptrs = self._ptrs(buf, idx)
            data = mem(self.vec(val))
            fn = llx.declare(cg.module, f"llvm.masked.scatter.{llx._suffix(data.type)}."
                             f"{llx._suffix(ptrs.type)}", llx.VOID,
                             [data.type, ptrs.type, I32, ir.VectorType(I1, self.lanes)])
            b.call(fn, [data, ptrs, I32(align), self._all_true()])

    def _i64(self, x: LaneValue, v: ir.Value) -> ir.Value:
        return v if x.dtype == "int64" else llx.cast(self.b, v, x.dtype, "int64")

    def _all_true(self) -> ir.Value:
        """The mask of the active lanes (all of them outside a ragged vector)."""
        if self.mask is not None:
            return self.mask
        return ir.Constant(ir.VectorType(I1, self.lanes), [I1(1)] * self.lanes)

    def _ptrs(self, buf, idx: LaneValue) -> ir.Value:
        """The ``<N x ptr>`` addresses of ``buf[idx]`` per lane."""
        v = self.vec(idx)
        if idx.dtype != "int64":
            v = llx.cast(self.b, v, idx.dtype, "int64")
        base = self.cg.buffer_ptr(buf)
        g = self.b.gep(base, [v], inbounds=True, source_etype=llx.mem_type(buf.dtype))
        g.type = ir.VectorType(base.type, self.lanes)  # a vector GEP yields <N x ptr>
        return g

    # -------------------------------------------------------------- expressions
    def ev(self, e: Expr) -> LaneValue:
        fn = getattr(self, "ev_" + type(e).__name__, None)
        if fn is None:
            raise InternalError(format_error(
                "codegen_llvm", f"expression node {type(e).__name__} reached code generation",
                "expected only loop IR expressions"))
        return fn(e)

    def uniform(self, e: Expr) -> LaneValue:
        return _u(self.cg.expr(e), e.dtype)

    def ev_Var(self, e: Var) -> LaneValue:
        if e is self.var:
            return self.ramp_var
        if e in self.lets:
            return self.lets[e]
        return self.uniform(e)

    def ev_Const(self, e: Const) -> LaneValue:
        return _u(llx.const(e.dtype, e.value), e.dtype)

    def cast(self, x: LaneValue, dtype: str) -> LaneValue:
        if x.dtype == dtype:
            return x
        if x.kind == "uniform":
            return _u(llx.cast(self.b, x.value, x.dtype, dtype), dtype)
        if (x.kind == "ramp" and dt.is_int(dtype) and dt.bits(dtype) == dt.bits(x.dtype)):
            return LaneValue("ramp", x.value, dtype, x.stride)
        return _vec(llx.cast(self.b, self.vec(x), x.dtype, dtype), dtype)

    def ev_Cast(self, e: Cast) -> LaneValue:
        return self.cast(self.ev(e.value), e.dtype)

    def ev_Binary(self, e: Binary) -> LaneValue:
        if e.op == "floordiv":
            return self.ev(floordiv_expr(e.a, e.b))
        if e.op == "floormod":
            return self.ev(floormod_expr(e.a, e.b))
        a, b, t = self.ev(e.a), self.ev(e.b), e.dtype
        if a.kind == "uniform" and b.kind == "uniform":
            return _u(llx.binop(self.b, e.op, a.value, b.value, t, self.cg.fast), t)
        if dt.is_int(t) and "vector" not in (a.kind, b.kind):
            r = self._ramp_binary(e, a, b)
            if r is not None:
                return r
        return _vec(llx.binop(self.b, e.op, self.vec(a), self.vec(b), t, self.cg.fast), t)

    def _ramp_binary(self, e: Binary, a: LaneValue, b: LaneValue) -> LaneValue | None:
        """Affine arithmetic on ramps/uniforms that stays a ramp, else None."""
        bld, t = self.b, e.dtype
        if e.op in ("add", "sub"):
            base = bld.add(a.value, b.value) if e.op == "add" else bld.sub(a.value, b.value)
            stride = a.stride + b.stride if e.op == "add" else a.stride - b.stride
            return LaneValue("ramp", base, t, stride)
        if e.op == "mul":
            for r, c, ce in ((a, b, e.b), (b, a, e.a)):
                if r.kind == "ramp" and c.kind == "uniform" and isinstance(ce, Const):
                    return LaneValue("ramp", bld.mul(r.value, c.value), t, r.stride * ce.value)
        return None

    def ev_Cmp(self, e: Cmp) -> LaneValue:
        a, b = self.ev(e.a), self.ev(e.b)
        if a.kind == "uniform" and b.kind == "uniform":
            return _u(llx.compare(self.b, e.op, a.value, b.value, e.a.dtype), "bool")
        return _vec(llx.compare(self.b, e.op, self.vec(a), self.vec(b), e.a.dtype), "bool")

    def _logic(self, e, lazy: Select, op) -> LaneValue:
        if traps_after(e.a, e.b):
            return self.ev(lazy)
        a, b = self.ev(e.a), self.ev(e.b)
        if a.kind == "uniform" and b.kind == "uniform":
            return _u(op(a.value, b.value), "bool")
        return _vec(op(self.vec(a), self.vec(b)), "bool")

    def ev_And(self, e: And) -> LaneValue:
        return self._logic(e, Select("bool", e.a, e.b, Const("bool", False)), self.b.and_)

    def ev_Or(self, e: Or) -> LaneValue:
        return self._logic(e, Select("bool", e.a, Const("bool", True), e.b), self.b.or_)

    def ev_Not(self, e: Not) -> LaneValue:
        a = self.ev(e.a)
        return _u(self.b.not_(a.value), "bool") if a.kind == "uniform" else \
            _vec(self.b.not_(self.vec(a)), "bool")

    def ev_Select(self, e: Select) -> LaneValue:
        c = self.ev(e.cond)
        lazy = traps_after(e.cond, e.true_value, e.false_value)
        if c.kind != "uniform" or not lazy:  # can_widen: a varying cond has safe operands
            t, f = self.ev(e.true_value), self.ev(e.false_value)
            if c.kind == t.kind == f.kind == "uniform":
                return _u(self.b.select(c.value, t.value, f.value), e.dtype)
            cv = c.value if c.kind == "uniform" else self.vec(c)
            return _vec(self.b.select(cv, self.vec(t), self.vec(f)), e.dtype)
        b = self.b
        out = {}
        with b.if_else(c.value) as (then, other):
            with then:
                out["t"] = (self.ev(e.true_value), b.block)
            with other:
                out["f"] = (self.ev(e.false_value), b.block)
        (t, tb), (f, fb) = out["t"], out["f"]
        merge = b.block
        if t.kind == f.kind == "uniform":
            phi = b.phi(t.value.type)
            phi.add_incoming(t.value, tb)
            phi.add_incoming(f.value, fb)
            return _u(phi, e.dtype)
        vals = []
        for x, blk in ((t, tb), (f, fb)):  # materialize each side in its own block
            b.position_before(blk.terminator)
            vals.append(self.vec(x))
        b.position_at_end(merge)
        phi = b.phi(vals[0].type)
        phi.add_incoming(vals[0], tb)
        phi.add_incoming(vals[1], fb)
        return _vec(phi, e.dtype)

    def ev_Call(self, e: Call) -> LaneValue:
        args = [self.ev(a) for a in e.args]
        t = e.args[0].dtype
        if all(a.kind == "uniform" for a in args):
            return _u(llx.math_call(self.b, e.name, [a.value for a in args], t, self.cg.fast,
                                    self.cg.fma), e.dtype)
        return _vec(llx.math_call(self.b, e.name, [self.vec(a) for a in args], t,
                                  self.cg.fast, self.cg.fma), e.dtype)

    def ev_ExternCall(self, e: ExternCall) -> LaneValue:
        # a pure C function or an LLVM intrinsic (can_widen sends the others to scalar
        # code): one scalar call per lane, in lane order
        args = [self.ev(a) for a in e.args]
        if all(a.kind == "uniform" for a in args):
            return _u(self.cg.extern_call(e, [a.value for a in args]), e.dtype)
        out = ir.Constant(ir.VectorType(llx.llvm_type(e.dtype), self.lanes), ir.Undefined)
        for k in range(self.lanes):
            r = self.cg.extern_call(e, [self.lane(a, k) for a in args])
            out = self.b.insert_element(out, r, I32(k))
        return _vec(out, e.dtype)

    def ev_Load(self, e: Load) -> LaneValue:
        buf, cg, b = e.buffer, self.cg, self.b
        if len(e.indices) != 1:
            cg.element_ptr(buf, e.indices)  # raises the contract error
        idx = self.ev(e.indices[0])
        align = dt.nbytes(buf.dtype)
        if idx.kind == "uniform" or (idx.kind == "ramp" and idx.stride == 0):
            p = b.gep(cg.buffer_ptr(buf), [self._i64(idx, idx.value)], inbounds=True)
            v = b.load(p, align=align)
            if buf.dtype == "bool":
                v = b.icmp_unsigned("!=", v, I8(0))
            return self.cast(_u(v, buf.dtype), e.dtype)
        vt = llx.mem_type(buf.dtype, self.lanes)
        if idx.kind == "ramp" and idx.stride == 1 and self.mask is not None:
            p = b.bitcast(b.gep(cg.buffer_ptr(buf), [self._i64(idx, idx.value)],
                                inbounds=True), vt.as_pointer())
            fn = llx.declare(cg.module, f"llvm.masked.load.{llx._suffix(vt)}."
                             f"{llx._suffix(p.type)}", vt, [p.type, I32, self.mask.type, vt])
            v = b.call(fn, [p, I32(align), self.mask, ir.Constant(vt, ir.Undefined)])
        elif idx.kind == "ramp" and idx.stride == 1:
            p = b.gep(cg.buffer_ptr(buf), [self._i64(idx, idx.value)], inbounds=True)
            v = b.load(b.bitcast(p, vt.as_pointer()), align=align)
        else:
            ptrs = self._ptrs(buf, idx)
            fn = llx.declare(cg.module, f"llvm.masked.gather.{llx._suffix(vt)}."
                             f"{llx._suffix(ptrs.type)}", vt,
                             [ptrs.type, I32, ir.VectorType(I1, self.lanes), vt])
            v = b.call(fn, [ptrs, I32(align), self._all_true(), ir.Constant(vt, ir.Undefined)])
        if buf.dtype == "bool":
            v = b.icmp_unsigned("!=", v, llx.const("int8", 0, self.lanes))
        return self.cast(_vec(v, buf.dtype), e.dtype)
