"""Loop IR → LLVM IR, through llvmlite's typed IR builder.

``codegen_llvm(func, target)`` turns one :class:`~polytile.schedule.loop_ir.PrimFunc` into an
``llvmlite.ir.Module`` holding ``i32 @<func.name>(params...)``:

* ``Buffer`` parameters become ``noalias`` pointers to their element type (``bool`` arrays
  are ``i8*``), ``Var`` parameters scalars of their dtype (``bool`` is passed as ``i8`` and
  ``float16`` as its ``i16`` bit pattern, because ctypes has neither).
* The result is a status: 0 on success, 1 when a heap allocation failed (see
  :data:`.intrinsics.STATUS_NO_MEMORY`). A failing path frees the live heap buffers of its
  function before returning.
* ``For`` loops: ``serial``/``unrolled`` become a counted loop over an ``i64`` phi;
  ``parallel`` loops are outlined and run through libgomp (:mod:`.parallel`); ``vectorized``
  loops are widened to ``<N x T>`` code (:mod:`.vectorize`).
* ``Allocate``: ``stack`` buffers are ``alloca``\\ s of constant size in the entry block of the
  enclosing LLVM function (never inside a loop), ``heap`` buffers ``malloc``/``free``, their
  start rounded up to :data:`HEAP_ALIGN` bytes.
* ``Select`` is lazy: when an operand may trap (a ``Load`` or an integer division, see
  :func:`.analysis.may_trap`) it is emitted with branches and a ``phi``, else as ``select``.
  ``And``/``Or`` with a right operand that may trap short-circuit the same way.
* ``floordiv``/``floormod`` are rewritten by :mod:`polytile.schedule.intdiv`.
* Loops with the ``nontemporal`` pragma: contiguous vector stores inside them are emitted
  with ``!nontemporal`` when their address is 16-byte aligned (checked at run time; other
  addresses get an ordinary store), see :meth:`CodeGen.vector_store`. Non-temporal stores
  are weakly ordered, so a function holding such a loop fences (``fence seq_cst``, x86
  ``mfence``) before it returns, before each ``GOMP_parallel`` call and at the end of each
  thread's part of a parallel loop.

The pass is pure: it reads ``func`` and returns a new module.
"""

from __future__ import annotations

import llvmlite.binding as llvm
import llvmlite.ir as ir

from polytile.backend import Target
from polytile.errors import BuildError, InternalError, format_error
from polytile.schedule.intdiv import floordiv_expr, floormod_expr
from polytile.schedule.kinds import LoopKind
from polytile.schedule.passes.int4 import NIBBLE_STORE
from polytile.schedule.loop_ir import (FOR_KINDS, AccessPtr, Allocate, ExternCall, TensorCall,
                                       is_empty, Assert, Buffer, Evaluate, For,
                                       IfThenElse, LetStmt, Load, PrimFunc, Seq, Stmt,
                                       StmtFunctor, Store, While, asserts, walk_stmts)
from polytile.te import dtype as dt
from polytile.te.expr import (And, Binary, Call, Cast, Cmp, Const, Expr, Not, Or, Select,
                              Var)
from polytile.te.visitor import collect

from . import intrinsics as llx
from .analysis import traps_after
from .intrinsics import I1, I8, I8P, I32, I64
from .parallel import emit_parallel
from .vectorize import emit_vectorized

#: Alignment (bytes) of the start of every heap buffer: one cache line, so that a packed
#: panel's full-width vectors never straddle two lines.
HEAP_ALIGN = 64


def param_llvm_type(p) -> ir.Type:
    """LLVM type of a function parameter (see the module docstring)."""
    if isinstance(p, Buffer):
        return llx.mem_type(p.dtype).as_pointer()
    if p.dtype == "bool":
        return I8
    if p.dtype == "float16":
        return ir.IntType(16)
    return llx.llvm_type(p.dtype)


class FnState:
    """Code generation state of one LLVM function (the main one or an outlined body).

    ``env`` maps ``Var`` to its current LLVM value and ``Buffer`` to its base pointer;
    ``heap`` lists the heap pointers live at the current point (freed on failure);
    ``in_parallel`` is true inside an outlined parallel body (inner parallel loops then
    run serially).
    """

    def __init__(self, fn: ir.Function, env: dict, in_parallel: bool):
        self.fn = fn
        self.env = env
        self.in_parallel = in_parallel
        self.heap: list = []
        # "entry" holds only the allocas; the code starts in "start" (see finish)
        self.entry = fn.append_basic_block("entry")
        self.b = ir.IRBuilder(fn.append_basic_block("start"))

    def finish(self) -> None:
        """Close the alloca block with a branch to the code."""
        ir.IRBuilder(self.entry).branch(self.fn.blocks[1])


class CodeGen(StmtFunctor):
    """Emits statements (``visit_<Class>``, through ``stmt``) and scalar expressions;
    :mod:`.vectorize` and :mod:`.parallel` call back into it."""

    def __init__(self, func: PrimFunc, target: Target):
        self.func = func
        self.target = target
        self.fast = target.fast_math
        self.fma = target.has_feature("fma")
        self.module = ir.Module(name=func.name)
        self.module.triple = llvm.get_process_triple()
        self.st: FnState | None = None
        self.n_outlined = 0
        #: nesting depth of loops with the ``nontemporal`` pragma at the current position
        self.nontemporal = 0
        #: whether any loop of the function has that pragma (then fences are emitted)
        self.streams = any("nontemporal" in x.pragmas for x in walk_stmts(func.body)
                           if isinstance(x, For))

    # ---------------------------------------------------------------- function level
    @property
    def b(self) -> ir.IRBuilder:
        return self.st.b

    def run(self) -> ir.Module:
        f = self.func
        for p in f.params:
            if isinstance(p, Buffer) and p.scope != "global":
                raise BuildError(format_error(
                    "codegen_llvm", f"parameter buffer {p.name!r} has scope {p.scope!r}",
                    "expected scope 'global' for function arguments"))
            if not isinstance(p, (Buffer, Var)):
                raise BuildError(format_error(
                    "codegen_llvm", f"parameter {p!r} is a {type(p).__name__}",
                    "expected Buffer or Var parameters"))
        fnty = ir.FunctionType(I32, [param_llvm_type(p) for p in f.params])
        fn = ir.Function(self.module, fnty, name=f.name)
        self.st = FnState(fn, {}, in_parallel=False)
        self.asserts = asserts(f.body)
        for p, a in zip(f.params, fn.args):
            a.name = p.name
            if isinstance(p, Buffer):
                a.add_attribute("noalias")
                self.st.env[p] = a
            elif p.dtype == "bool":
                self.st.env[p] = self.b.icmp_unsigned("!=", a, I8(0))
            elif p.dtype == "float16":
                self.st.env[p] = self.b.bitcast(a, ir.HalfType())
            else:
                self.st.env[p] = a
        self.stmt(f.body)
        self.fence_streams()
        self.b.ret(I32(llx.STATUS_OK))
        self.st.finish()
        return self.module

    def fence_streams(self) -> None:
        """Order the non-temporal stores emitted so far before what follows (they are
        weakly ordered: another thread could otherwise read stale values)."""
        if self.streams:
            self.b.fence("seq_cst")

    def vector_store(self, value: ir.Value, ptr: ir.Value, align: int) -> None:
        """Store vector ``value`` at element pointer ``ptr`` (element alignment ``align``);
        inside a ``nontemporal`` loop, a non-temporal store when ``ptr`` is 16-byte aligned
        at run time and the vector a multiple of 16 bytes."""
        b = self.b
        vp = b.bitcast(ptr, value.type.as_pointer())
        nbytes = value.type.count * align
        if not self.nontemporal or nbytes % 16 or align >= 16:
            b.store(value, vp, align=align)
            return
        aligned = b.icmp_unsigned("==", b.and_(b.ptrtoint(vp, I64), I64(15)), I64(0))
        with b.if_else(aligned, likely=True) as (then, other):
            with then:
                st = b.store(value, vp, align=16)
                st.set_metadata("nontemporal", self.module.add_metadata([I32(1)]))
            with other:
                b.store(value, vp, align=align)

    def new_function(self, suffix: str, ret: ir.Type, args: list) -> ir.Function:
        """A fresh internal function ``<name>.<suffix><k>`` in the module."""
        name = f"{self.func.name}.{suffix}{self.n_outlined}"
        self.n_outlined += 1
        fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
        fn.linkage = "internal"
        return fn

    def fail(self, status: ir.Value) -> None:
        """Terminate the current block: free the live heap buffers, return ``status``."""
        free = llx.declare(self.module, "free", llx.VOID, [I8P])
        for p in reversed(self.st.heap):
            self.b.call(free, [self.b.bitcast(p, I8P)])
        self.b.ret(status)

    def alloca(self, ty: ir.Type, count: int, name: str) -> ir.Value:
        """An ``alloca`` of ``count`` elements of ``ty`` at the start of the entry block."""
        p = ir.IRBuilder(self.st.entry).alloca(ty, size=I64(count), name=name)
        p.align = 64
        return p

    # ---------------------------------------------------------------- statements
    def stmt(self, s: Stmt) -> None:
        """Emit statement ``s`` at the builder's position."""
        self.visit(s)

    def visit_Seq(self, s: Seq) -> None:
        for x in s.stmts:
            self.visit(x)

    def visit_LetStmt(self, s: LetStmt) -> None:
        v = llx.cast(self.b, self.expr(s.value), s.value.dtype, s.var.dtype)
        self.let(s.var, v, lambda: self.visit(s.body))

    def visit_Evaluate(self, s: Evaluate) -> None:
        # only calls of tensor intrinsic bodies have side effects
        if collect(s.value, ExternCall):
            self.expr(s.value)

    def visit_TensorCall(self, s: TensorCall) -> None:
        if is_empty(s.body):
            raise InternalError(format_error(
                "codegen_llvm", f"call of intrinsic {s.intrin.name!r} has no code",
                "storage flattening binds its regions and calls fcompute"))
        self.visit(s.body)

    def visit_Assert(self, s: Assert) -> None:
        k = next(i for i, a in enumerate(self.asserts) if a is s)
        ok = self.expr(s.cond)
        with self.b.if_then(self.b.not_(ok), likely=False):
            self.fail(I32(llx.STATUS_ASSERT + k))

    def generic_visit(self, s, *args) -> None:
        raise BuildError(format_error("codegen_llvm", f"unknown statement "
                                      f"{type(s).__name__}", "expected a loop IR statement"))

    def let(self, var: Var, value, body) -> None:
        """Bind ``var`` to ``value`` while ``body()`` runs."""
        env = self.st.env
        old = env.get(var, None)
        env[var] = value
        try:
            body()
        finally:
            if old is None:
                env.pop(var, None)
            else:
                env[var] = old

    def visit_For(self, s: For) -> None:
        if s.var.dtype != "int64" or not isinstance(s.step, int) or s.step < 1:
            raise InternalError(format_error(
                "codegen_llvm", f"loop {s.var.name!r} has variable dtype {s.var.dtype} and "
                f"step {s.step!r}", "expected an int64 loop variable and a positive int step"))
        if "nontemporal" in s.pragmas:
            self.nontemporal += 1
            try:
                self._for(s)
            finally:
                self.nontemporal -= 1
        else:
            self._for(s)

    def _for(self, s: For) -> None:
        if s.kind == LoopKind.PARALLEL and not self.st.in_parallel:
            emit_parallel(self, s)
        elif s.kind == LoopKind.VECTORIZED:
            emit_vectorized(self, s)
        elif s.kind in FOR_KINDS:
            lo = self.index(s.min)
            end = self.b.add(lo, self.index(s.extent))
            self.loop(lo, end, s.step, s.var.name,
                      lambda iv: self.let(s.var, iv, lambda: self.stmt(s.body)))
        else:
            raise BuildError(format_error("codegen_llvm", f"loop {s.var.name!r} has kind "
                                          f"{s.kind!r}", "expected serial, unrolled, parallel or "
                                          "vectorized"))

    def loop(self, lo: ir.Value, end: ir.Value, step: int, name: str, body) -> None:
        """``for (iv = lo; iv < end; iv += step) body(iv)`` over ``i64``."""
        b = self.b
        pre = b.block
        header = b.append_basic_block(f"{name}.header")
        blk = b.append_basic_block(f"{name}.body")
        exit_ = b.append_basic_block(f"{name}.exit")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(I64, name=name)
        iv.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", iv, end), blk, exit_)
        b.position_at_end(blk)
        body(iv)
        nxt = self.b.add(iv, I64(step), name=f"{name}.next")
        iv.add_incoming(nxt, self.b.block)
        self.b.branch(header)
        self.b.position_at_end(exit_)

    def visit_While(self, s: While) -> None:
        # the condition is evaluated in its own block before every iteration
        b = self.b
        header = b.append_basic_block("while.header")
        blk = b.append_basic_block("while.body")
        exit_ = b.append_basic_block("while.exit")
        b.branch(header)
        b.position_at_end(header)
        b.cbranch(self.expr(s.cond), blk, exit_)
        b.position_at_end(blk)
        self.stmt(s.body)
        self.b.branch(header)
        self.b.position_at_end(exit_)

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        cond = self.expr(s.cond)
        if s.else_case is None:
            with self.b.if_then(cond):
                self.stmt(s.then_case)
        else:
            with self.b.if_else(cond) as (then, other):
                with then:
                    self.stmt(s.then_case)
                with other:
                    self.stmt(s.else_case)

    def visit_Allocate(self, s: Allocate) -> None:
        buf = s.buffer
        ety = llx.mem_type(buf.dtype)
        if buf.scope == "stack":
            n = 1
            for d in buf.shape:
                v = d.value if isinstance(d, Const) else d
                if not isinstance(v, int):
                    raise InternalError(format_error(
                        "codegen_llvm", f"stack buffer {buf.name!r} has the non-constant "
                        f"shape {list(buf.shape)}", "expected a constant shape (or scope 'heap')"))
                n *= v
            ptr = self.alloca(ety, max(n, 1), buf.name)
            self.let(buf, ptr, lambda: self.stmt(s.body))
        elif buf.scope == "heap":
            raw = self.malloc(buf)
            # malloc aligns to 16 bytes only: a 64-byte vector at a 16-byte offset spans two
            # cache lines and costs two loads (about 10 % of a packed GEMM micro-kernel)
            # (a byte offset from malloc's pointer, not an inttoptr: LLVM then still knows
            # that the buffer aliases nothing else, which keeps accumulators in registers)
            pad = self.b.and_(self.b.neg(self.b.ptrtoint(raw, I64)), I64(HEAP_ALIGN - 1))
            ptr = self.b.bitcast(self.b.gep(raw, [pad], inbounds=True), ety.as_pointer(),
                                 name=buf.name)
            self.st.heap.append(raw)
            self.let(buf, ptr, lambda: self.stmt(s.body))
            self.st.heap.pop()
            self.b.call(llx.declare(self.module, "free", llx.VOID, [I8P]), [raw])
        else:
            raise BuildError(format_error(
                "codegen_llvm", f"buffer {buf.name!r} has scope {buf.scope!r}",
                "expected scope 'stack' or 'heap' for allocations on CPU"))

    def malloc(self, buf: Buffer) -> ir.Value:
        """``malloc`` the bytes of ``buf`` plus :data:`HEAP_ALIGN` - 1 (room to align the
        start); on overflow of the size or a NULL result the function fails with the
        out-of-memory status."""
        b = self.b
        size, over = I64(dt.nbytes(buf.dtype)), I1(0)
        for d in buf.shape:
            dim = self.index(d if isinstance(d, Expr) else Const("int64", int(d)))
            res = b.umul_with_overflow(size, dim)
            size = b.extract_value(res, 0)
            over = b.or_(over, b.extract_value(res, 1))
        res = b.uadd_with_overflow(size, I64(HEAP_ALIGN - 1))
        size = b.extract_value(res, 0)
        over = b.or_(over, b.extract_value(res, 1))
        malloc = llx.declare(self.module, "malloc", I8P, [I64])
        raw = b.call(malloc, [size], name=f"{buf.name}.raw")
        bad = b.or_(over, b.icmp_unsigned("==", raw, ir.Constant(I8P, None)))
        with b.if_then(bad, likely=False):
            self.fail(I32(llx.STATUS_NO_MEMORY))
        return raw

    # ---------------------------------------------------------------- memory access
    def index(self, e: Expr) -> ir.Value:
        """Evaluate an index or loop bound as ``i64``."""
        return llx.cast(self.b, self.expr(e), e.dtype, "int64") if e.dtype != "int64" \
            else self.expr(e)

    def buffer_ptr(self, buf: Buffer) -> ir.Value:
        try:
            return self.st.env[buf]
        except KeyError:
            raise BuildError(format_error(
                "codegen_llvm", f"buffer {buf.name!r} is used outside its allocation",
                "expected a parameter buffer or one introduced by an enclosing Allocate")) from None

    def element_ptr(self, buf: Buffer, indices: tuple) -> ir.Value:
        if len(indices) != 1:
            raise InternalError(format_error(
                "codegen_llvm", f"access to {buf.name!r} has {len(indices)} indices",
                "expected exactly one (flattened) index after storage flattening"))
        return self.b.gep(self.buffer_ptr(buf), [self.index(indices[0])], inbounds=True)

    def visit_Store(self, s: Store) -> None:
        v = self.expr(s.value)
        if s.value.dtype != s.buffer.dtype:
            v = llx.cast(self.b, v, s.value.dtype, s.buffer.dtype)
        if s.buffer.dtype == "bool":
            v = self.b.zext(v, I8)
        self.b.store(v, self.element_ptr(s.buffer, s.indices), align=dt.nbytes(s.buffer.dtype))

    # ---------------------------------------------------------------- expressions
    def expr(self, e: Expr) -> ir.Value:
        """Evaluate scalar expression ``e`` at the builder's position."""
        fn = getattr(self, "expr_" + type(e).__name__, None)
        if fn is None:
            raise InternalError(format_error(
                "codegen_llvm", f"expression node {type(e).__name__} reached code generation",
                "expected only loop IR expressions (lowering removes TensorRead and Reduce)"))
        return fn(e)

    def expr_Var(self, e: Var) -> ir.Value:
        try:
            return self.st.env[e]
        except KeyError:
            raise BuildError(format_error(
                "codegen_llvm", f"variable {e.name!r} is used but not defined",
                "expected a parameter, a loop variable or a LetStmt variable in scope")) from None

    def expr_Const(self, e: Const) -> ir.Value:
        return llx.const(e.dtype, e.value)

    def expr_Cast(self, e: Cast) -> ir.Value:
        return llx.cast(self.b, self.expr(e.value), e.value.dtype, e.dtype)

    def expr_Binary(self, e: Binary) -> ir.Value:
        if e.op == "floordiv":
            return self.expr(floordiv_expr(e.a, e.b))
        if e.op == "floormod":
            return self.expr(floormod_expr(e.a, e.b))
        return llx.binop(self.b, e.op, self.expr(e.a), self.expr(e.b), e.dtype, self.fast)

    def expr_Cmp(self, e: Cmp) -> ir.Value:
        return llx.compare(self.b, e.op, self.expr(e.a), self.expr(e.b), e.a.dtype)

    def expr_And(self, e: And) -> ir.Value:
        if traps_after(e.a, e.b):
            return self.expr(Select("bool", e.a, e.b, Const("bool", False)))
        return self.b.and_(self.expr(e.a), self.expr(e.b))

    def expr_Or(self, e: Or) -> ir.Value:
        if traps_after(e.a, e.b):
            return self.expr(Select("bool", e.a, Const("bool", True), e.b))
        return self.b.or_(self.expr(e.a), self.expr(e.b))

    def expr_Not(self, e: Not) -> ir.Value:
        return self.b.not_(self.expr(e.a))

    def expr_Select(self, e: Select) -> ir.Value:
        cond = self.expr(e.cond)
        if not traps_after(e.cond, e.true_value, e.false_value):
            return self.b.select(cond, self.expr(e.true_value), self.expr(e.false_value))
        return self.branch_select(cond, lambda: self.expr(e.true_value),
                                  lambda: self.expr(e.false_value))

    def branch_select(self, cond: ir.Value, then_fn, else_fn) -> ir.Value:
        """``cond ? then_fn() : else_fn()`` evaluating only the chosen side (branches and a
        ``phi``); the two callables must return values of one LLVM type."""
        b = self.b
        with b.if_else(cond) as (then, other):
            with then:
                tv = then_fn()
                tb = b.block
            with other:
                fv = else_fn()
                fb = b.block
        phi = b.phi(tv.type)
        phi.add_incoming(tv, tb)
        phi.add_incoming(fv, fb)
        return phi

    def expr_Call(self, e: Call) -> ir.Value:
        args = [self.expr(a) for a in e.args]
        return llx.math_call(self.b, e.name, args, e.args[0].dtype, self.fast, self.fma)

    def expr_AccessPtr(self, e: AccessPtr) -> ir.Value:
        return self.b.gep(self.buffer_ptr(e.buffer), [self.index(e.offset)], inbounds=True)

    def expr_ExternCall(self, e: ExternCall) -> ir.Value:
        if e.kind == "atomic":
            return self.atomic_call(e)
        if e.kind == "intrin":
            raise BuildError(format_error(
                "codegen_llvm", f"call_intrin {e.name!r} is a builtin of a C dialect",
                "call_extern or call_llvm_intrin on the llvm target"))
        v = self.extern_call(e, [self.expr(a) for a in e.args])
        if e.kind == "packed":
            # the Python function raised: stop, and let the caller raise it again
            with self.b.if_then(self.b.icmp_signed("!=", v, I32(0)), likely=False):
                self.fail(I32(llx.STATUS_PACKED))
        return v

    def atomic_call(self, e: ExternCall) -> ir.Value:
        """An atomic update of memory (kind ``atomic``): ``nibble_store(ptr, shift, v)``
        sets bits ``shift..shift+3`` of the byte at ``ptr`` to ``v`` with an atomic ``and``
        then an atomic ``or``, so that another thread storing the byte's other nibble at
        the same time keeps its bits (:mod:`polytile.schedule.passes.int4`)."""
        if e.name != NIBBLE_STORE:
            raise BuildError(format_error("codegen_llvm", f"atomic call {e.name!r}",
                                          f"expected {NIBBLE_STORE!r}"))
        ptr, shift, v = (self.expr(a) for a in e.args)
        b = self.b
        keep = b.xor(b.shl(I8(15), shift), I8(255))
        b.atomic_rmw("and", ptr, keep, "monotonic")
        b.atomic_rmw("or", ptr, b.shl(v, shift), "monotonic")
        return I32(0)

    def extern_call(self, e: ExternCall, args: list) -> ir.Value:
        """Call the function of ``e`` on the LLVM values ``args`` (scalars; the vector
        widener calls it once per lane)."""
        if e.name == "llvm.prefetch.p0":
            # one declaration for the addresses of every element type (Stage.prefetch)
            args = [self.b.bitcast(args[0], I8P), *args[1:]]
        ret = llx.VOID if e.dtype == "void" else llx.llvm_type(e.dtype)
        fn = self.module.globals.get(e.name)
        fnty = ir.FunctionType(ret, [a.type for a in args])
        if fn is None:
            fn = ir.Function(self.module, fnty, name=e.name)
        elif fn.function_type != fnty:
            raise BuildError(format_error(
                "codegen_llvm", f"{e.kind} function {e.name!r} is called with types "
                f"({', '.join(str(a.type) for a in args)}) -> {ret}, and elsewhere as "
                f"{fn.function_type}", "one signature per function"))
        v = self.b.call(fn, args)
        return I32(0) if e.dtype == "void" else v

    def expr_Load(self, e: Load) -> ir.Value:
        v = self.b.load(self.element_ptr(e.buffer, e.indices), align=dt.nbytes(e.buffer.dtype))
        if e.buffer.dtype == "bool":
            v = self.b.icmp_unsigned("!=", v, I8(0))
        if e.dtype != e.buffer.dtype:
            v = llx.cast(self.b, v, e.buffer.dtype, e.dtype)
        return v


def codegen_llvm(func: PrimFunc, target: Target) -> ir.Module:
    """Translate ``func`` into an LLVM module (unoptimised), for a CPU ``target``.

    Parameters
    ----------
    func : PrimFunc
        Lowered loop IR: flattened one-index accesses, ``int64`` loop variables and indices.
    target : Target
        An ``llvm`` target; its ``fast_math`` flag picks the float instruction flags.

    Returns
    -------
    llvmlite.ir.Module
        The module defining ``i32 @<func.name>(...)`` (and internal outlined bodies).

    Raises
    ------
    BuildError
        For constructs the CPU backend does not support (unknown statements, GPU scopes,
        undefined variables, unknown intrinsics).
    InternalError
        When ``func`` breaks the loop-IR contract (several indices per access, a vectorized
        loop with a non-constant extent or an inner loop, a non-constant stack buffer).
    """
    if target.kind != "llvm":
        raise BuildError(format_error("codegen_llvm", f"target {str(target)!r} is not a CPU "
                                      "target", "expected an 'llvm' target"))
    return CodeGen(func, target).run()
