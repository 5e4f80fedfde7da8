"""int4/uint4: arithmetic in 8 bits (:func:`legalize_int4`), storage two per byte
(:func:`pack_int4`).

Assumes: the loop IR of :mod:`polytile.schedule.loop_ir`, with ``int4``/``uint4`` meaning
what :mod:`polytile.te.dtype` says: integers of 4 bits whose arithmetic wraps modulo 16,
stored packed along the last axis of their tensor, element ``2m`` of a row in the low
nibble of byte ``m``, ``2m + 1`` in the high one, each row starting on a new byte.

Guarantees:

* after :func:`legalize_int4` (a loop pass, next to the bfloat16 one) the only ``int4``
  values are loads of ``int4`` buffers, each converted at once to its *carrier* (``int8``
  for ``int4``, ``uint8`` for ``uint4``), and the values of stores into them, a
  conversion ``Cast(int4, v)`` of a carrier ``v`` that already lies in the 4-bit range.
  Every operation is computed on carriers and wrapped back into 4 bits::

      x + y          ->  wrap(int8(x) + int8(y))      wrap(v) = ((v & 15) ^ 8) - 8
      uint4(x - y)   ->  (uint8(x) - uint8(y)) & 15
      int4(f)        ->  wrap(int8(int32(f)))         (f a float)
      float32(x)     ->  float32(int8(x))             (exact)

* after :func:`pack_int4` (run just before storage flattening) no ``int4`` is left: each
  ``int4`` buffer is a ``uint8`` buffer of shape ``(..., ceil(n / 2))``
  (:attr:`~polytile.schedule.loop_ir.Buffer.packs` names what it holds), a load reads its
  byte and extracts the nibble (sign-extended for ``int4``), and a store writes its own
  nibble only. Where other threads may write the other nibble of the same byte at the
  same time (inside a parallel loop, or a GPU kernel for a buffer that is not ``local``)
  the store is two atomic operations on the byte (``and`` clearing the nibble, ``or``
  setting it: an ``ExternCall`` of kind ``atomic`` named ``nibble_store``); elsewhere a
  plain read-modify-write (in a parallel loop whose variable does not reach the last
  index, each iteration stores rows of its own, which start on whole bytes). A
  vectorized loop that stores to an ``int4`` buffer runs as a serial loop (its lanes
  would read and write one byte together). A serial loop whose
  body stores one element of a row per iteration, at an offset plus the loop variable,
  stores pairs instead: two elements computed, their byte stored whole (no
  read-modify-write, so that the compilers vectorize it); a first element on a high
  nibble (an odd offset, known or tested at run time) and an odd last element alone. A
  body guarded by an upper bound on the index (``if 6 * tx + j < n``: a split that does
  not divide the row) becomes a loop over ``min(extent, n - 6 * tx)`` elements, paired
  the same way.

Refused (``LoweringError`` naming the buffer): a symbolic last extent (the packed array
would not tell ``n``), and ``int4`` operands of tensor intrinsics and ``te.extern`` calls
(their code would see bytes, not elements).

The rewrite of operations in :func:`legalize_int4` is :mod:`.storage_dtype`'s, shared with
the bfloat16 pass.

Helps: TVM's int4 tensors (quantised weights) at half the memory of int8. Models: numpy's
``packbits`` layout convention (low part first), TVM's sub-byte ``Buffer`` storage.
"""

from __future__ import annotations

from polytile.errors import InternalError, LoweringError, format_error
from polytile.te import dtype as dt
from polytile.te import symbolic as sym
from polytile.te.expr import And, Binary, Cast, Cmp, Const, Expr, Select, Var
from polytile.te.visitor import ExprMutator, post_order_visit, substitute

from ..kinds import LoopKind, thread_private
from ..loop_ir import (AccessPtr, Allocate, Buffer, Evaluate, ExternCall, For, IfThenElse,
                       KernelLaunch,
                       LetStmt, Load, PrimFunc, Stmt, StmtMutator, Store, TensorCall,
                       walk_stmts)
from .storage_dtype import WidenArithmetic, WidenStmts, uses_dtype

#: the name of the atomic nibble store (``ExternCall`` of kind ``atomic``): arguments
#: ``(AccessPtr(byte), shift, value)`` with ``shift`` 0 or 4 and ``value`` in [0, 15]
NIBBLE_STORE = "nibble_store"


def carrier(dtype: str) -> str:
    """The 8-bit dtype that holds the values of ``int4`` (``int8``) or ``uint4``
    (``uint8``)."""
    return "int8" if dtype == "int4" else "uint8"


def _c(dtype: str, v: int) -> Const:
    return Const(dtype, v)


def wrap(v: Expr, dtype: str) -> Expr:
    """``v`` (of ``carrier(dtype)``) wrapped into the range of ``dtype``, as a carrier."""
    if dtype == "uint4":
        return Binary("uint8", "bitand", v, _c("uint8", 15))
    low = Binary("int8", "bitand", v, _c("int8", 15))
    return Binary("int8", "sub", Binary("int8", "bitxor", low, _c("int8", 8)), _c("int8", 8))


# ------------------------------------------------------------------ arithmetic in 8 bits
class _Arith(WidenArithmetic):
    """Every ``int4`` expression becomes its carrier (see the module docstring): its leaves
    at once, so that the operands of an operation are carriers already."""

    def __init__(self, renamed: dict):
        super().__init__()
        self.renamed = renamed    # int4 Var -> its carrier Var (let-bound variables)

    def narrow(self, dtype: str) -> bool:
        return dt.is_int4(dtype)

    def wide(self, dtype: str) -> str:
        return carrier(dtype)

    def widen(self, x: Expr) -> Expr:
        return x

    def narrowed(self, x: Expr, dtype: str) -> Expr:
        return wrap(x, dtype)

    def visit_Var(self, e: Var):
        return self.renamed.get(e, e)

    def visit_Const(self, e: Const):
        return Const(carrier(e.dtype), e.value) if dt.is_int4(e.dtype) else e

    def visit_Load(self, e: Load):
        out = self.generic_visit(e)
        return Cast(carrier(e.dtype), out) if dt.is_int4(e.dtype) else out

    def visit_Cast(self, e: Cast):
        v = self.visit(e.value)
        if not dt.is_int4(e.dtype):
            return e if v is e.value else Cast(e.dtype, v)
        c = carrier(e.dtype)
        if dt.is_float(v.dtype):
            v = Cast("int32", v)
        return wrap(v if v.dtype == c else Cast(c, v), e.dtype)

    def visit_Select(self, e: Select):
        out = self.generic_visit(e)
        if dt.is_int4(e.dtype):
            return Select(carrier(e.dtype), out.cond, out.true_value, out.false_value)
        return out


class _ArithStmts(WidenStmts):
    def __init__(self):
        self.renamed: dict = {}
        super().__init__(_Arith(self.renamed))

    def visit_expr(self, e: Expr) -> Expr:
        out = super().visit_expr(e)
        if dt.is_int4(out.dtype):
            raise InternalError(f"legalize_int4: {out.dtype} expression {out} left")
        return out

    def stored(self, value: Expr, dtype: str) -> Expr:
        # the value is a carrier in the 4-bit range: the conversion only names the dtype
        return Cast(dtype, value) if dt.is_int4(dtype) else value

    def visit_LetStmt(self, s: LetStmt):
        if dt.is_int4(s.var.dtype):
            self.renamed[s.var] = Var(carrier(s.var.dtype), s.var.name)
        return self.generic_visit(s) if not dt.is_int4(s.var.dtype) else LetStmt(
            self.renamed[s.var], self.visit_expr(s.value), self.visit(s.body))


def legalize_int4(s: Stmt) -> Stmt:
    """Rewrite every ``int4``/``uint4`` operation of ``s`` into 8-bit arithmetic wrapped to
    4 bits (see the module docstring). Returns ``s`` itself when it uses no ``int4``."""
    if not uses_dtype(s, dt.is_int4):
        return s
    return _ArithStmts().visit(s)


# ------------------------------------------------------------------ two per byte
def _packed(b: Buffer, is_param: bool) -> Buffer:
    """The ``uint8`` buffer holding ``int4`` buffer ``b``."""
    if b.shape and not sym.is_static(b.shape[-1]):
        raise LoweringError(format_error(
            "int4", f"{b.dtype} tensor {b.name!r} has the symbolic last extent "
            f"{b.shape[-1]}", "a constant last extent (the packed array holds ceil(n / 2) "
            "bytes per row, which does not tell n)",
            hint=f"make the last axis of {b.name!r} constant, or store it as int8"))
    shape = tuple(b.shape)
    if shape:
        nbytes = (int(sym.static(shape[-1])) + 1) // 2
        if b.scope == "shared" and not is_param:
            # the atomic store updates the aligned 32-bit word around its byte
            nbytes = (nbytes + 3) // 4 * 4
        shape = shape[:-1] + (nbytes,)
    return Buffer(b.name, shape, "uint8", b.scope, b.swizzle, packs=b.dtype)


def _nibble(last: Expr) -> tuple[Expr, Expr]:
    """(byte index, shift) of last-axis index ``last``: ``last >> 1`` and ``4 * (last &
    1)`` (indices are never negative)."""
    if isinstance(last, Const):
        return _c("int64", int(last.value) >> 1), _c("int64", (int(last.value) & 1) * 4)
    i = last if last.dtype == "int64" else Cast("int64", last)
    byte = Binary("int64", "shr", i, _c("int64", 1))
    shift = Binary("int64", "mul", Binary("int64", "bitand", i, _c("int64", 1)),
                   _c("int64", 4))
    return byte, shift


class _PackExprs(ExprMutator):
    def __init__(self, packed: dict, renamed: dict):
        super().__init__()
        self.packed = packed
        self.renamed = renamed

    def visit_Var(self, e: Var):
        return self.renamed.get(e, e)

    def visit_Const(self, e: Const):
        return Const(carrier(e.dtype), e.value) if dt.is_int4(e.dtype) else e

    def visit_Load(self, e: Load):
        idx = tuple(self.visit(i) for i in e.indices)
        p = self.packed.get(id(e.buffer))
        if p is None:
            return e if all(a is b for a, b in zip(idx, e.indices)) else Load(e.dtype,
                                                                              e.buffer, idx)
        if not idx:
            u = Binary("uint8", "bitand", Load("uint8", p, ()), _c("uint8", 15))
        else:
            byte, shift = _nibble(idx[-1])
            word = Load("uint8", p, idx[:-1] + (byte,))
            u = Binary("uint8", "bitand",
                       Binary("uint8", "shr", word, Cast("uint8", shift)), _c("uint8", 15))
        return u if e.buffer.dtype == "uint4" else wrap(Cast("int8", u), "int4")

    def visit_Cast(self, e: Cast):
        v = self.visit(e.value)
        if dt.is_int4(e.dtype):
            c = carrier(e.dtype)
            return wrap(v if v.dtype == c else Cast(c, v), e.dtype)
        if v.dtype == e.dtype:
            return v
        return e if v is e.value else Cast(e.dtype, v)

    def visit_AccessPtr(self, e: AccessPtr):
        if id(e.buffer) in self.packed:
            raise LoweringError(format_error(
                "int4", f"the address of {e.buffer.dtype} tensor {e.buffer.name!r} is "
                "taken (a tensor intrinsic or te.extern operand)", "int4 tensors read and "
                "written element by element", hint="give the intrinsic int8 operands"))
        return self.generic_visit(e)


class _Pack(StmtMutator):
    def __init__(self, packed: dict):
        self.packed = packed
        self.renamed: dict = {}
        self.ex = _PackExprs(packed, self.renamed)
        self.parallel: set = set()   # variables of the parallel loops around (and lets
        #                              whose values depend on them)
        self.kernel = 0       # kernels around it

    def visit_expr(self, e: Expr) -> Expr:
        out = self.ex.visit(e)
        if dt.is_int4(out.dtype):
            raise InternalError(f"pack_int4: {out.dtype} expression {out} left")
        return out

    def visit_For(self, s: For):
        if s.kind == LoopKind.VECTORIZED and any(
                isinstance(x, Store) and id(x.buffer) in self.packed for x in walk_stmts(s.body)):
            s = For(s.var, s.min, s.extent, LoopKind.SERIAL, s.body, s.step, s.pragmas)
        # whole bytes are safe anywhere: another thread storing into the byte would store
        # one of its two elements, a race that legal schedules do not have
        if s.kind in (LoopKind.SERIAL, LoopKind.UNROLLED):
            paired = self._paired(s)
            if paired is not None:
                return paired
        if s.kind != LoopKind.PARALLEL:
            return self.generic_visit(s)
        self.parallel.add(s.var)
        try:
            return self.generic_visit(s)
        finally:
            self.parallel.discard(s.var)

    def _paired(self, s: For) -> Stmt | None:
        """A loop whose body stores one element of an int4 row per iteration, at ``base +
        var``: each iteration of the new loop computes two elements and stores their byte
        whole (no read-modify-write, nothing carried from one iteration to the next, so
        the C compiler and LLVM can vectorize it). Where ``base`` may be odd (a split by
        an odd factor) the first element is stored alone when it is; an odd last element
        likewise (alone: its neighbour nibble keeps what it held). A body guarded by ``if
        base + var < bound`` (a split that does not divide the row, on a GPU) runs over
        ``min(extent, bound - base)`` elements instead, the guard's other conditions
        (free of ``var``) around the loop. The value must not read the buffer it is
        stored to (the two elements would then be computed before the first is stored).
        None where the loop is not of that form."""
        st, guard, bound = s.body, None, None
        if isinstance(st, IfThenElse) and st.else_case is None:
            split = _split_guard(st.cond, s.var)
            if split is None:
                return None
            guard, bound = split
            st = st.then_case
        if not (isinstance(st, Store) and id(st.buffer) in self.packed and st.indices
                and isinstance(s.min, Const) and s.min.value == 0 and s.step == 1
                and not (isinstance(s.extent, Const) and int(s.extent.value) < 2)):
            return None
        v = s.var
        base = _offset_of(st.indices[-1], v)
        if base is None or any(_reads(i, v) for i in st.indices[:-1]):
            return None
        if any(isinstance(x, Load) and x.buffer is st.buffer for x in _loads(st.value)):
            return None
        p = self.packed[id(st.buffer)]
        val = st.value.value if isinstance(st.value, Cast) and \
            st.value.dtype == st.buffer.dtype else st.value
        jj = Var("int64", f"{v.name}.pair")
        from ..loop_ir import seq

        If = IfThenElse

        # n elements, the first at an odd offset when head is 1 (Const where known)
        n = _fold(s.extent) if isinstance(s.extent, Const) else _i64(self.visit_expr(s.extent))
        if bound is not None:
            n = Binary("int64", "min", _i64(n), self.visit_expr(bound))
        vb = _i64(self.visit_expr(base))
        head = _c("int64", 0) if _even(base) else (
            _c("int64", int(base.value) & 1) if isinstance(base, Const) else
            Binary("int64", "bitand", vb, _c("int64", 1)))
        rest = _sub(n, head)

        def at(j: Expr, what: Expr) -> Expr:
            return self.visit_expr(substitute(what, {v: j if v.dtype == "int64" else
                                                     Cast(v.dtype, j)}))

        def nib(j: Expr) -> Expr:
            x = at(j, val)
            x = x if x.dtype == "uint8" else Cast("uint8", x)
            return Binary("uint8", "bitand", x, _c("uint8", 15))

        def alone(j: Expr) -> Stmt:
            jv = j if v.dtype == "int64" else Cast(v.dtype, j)
            return self.visit(Store(st.buffer, st.indices[:-1] + (substitute(
                st.indices[-1], {v: jv}),), substitute(st.value, {v: jv})))

        two = _add(head, Binary("int64", "mul", jj, _c("int64", 2)))
        lo, hi = nib(two), nib(_add(two, _c("int64", 1)))
        lead = tuple(self.visit_expr(i) for i in st.indices[:-1])
        start = _add(vb, head)
        half = jj if isinstance(start, Const) and start.value == 0 else Binary(
            "int64", "add", Binary("int64", "shr", start, _c("int64", 1)), jj)
        byte = Binary("uint8", "bitor", lo, Binary("uint8", "shl", hi, _c("uint8", 4)))
        out = [For(jj, _c("int64", 0), _shr1(rest), s.kind, Store(p, lead + (half,), byte), 1,
                   s.pragmas)]
        if not (isinstance(head, Const) and head.value == 0):
            first = alone(_c("int64", 0))
            out.insert(0, first if isinstance(head, Const) and isinstance(n, Const) else
                       If(_and(_ne0(head), _gt0(n)), first))
        if not (isinstance(rest, Const) and rest.value % 2 == 0):
            last = alone(_sub(n, _c("int64", 1)))
            out.append(last if isinstance(rest, Const) else
                       If(And("bool", _gt0(rest), _ne0(Binary("int64", "bitand", rest,
                                                              _c("int64", 1)))), last))
        body = seq(*out)
        return body if guard is None else If(self.visit_expr(guard), body)

    def visit_KernelLaunch(self, s: KernelLaunch):
        self.kernel += 1
        try:
            return self.generic_visit(s)
        finally:
            self.kernel -= 1

    def visit_LetStmt(self, s: LetStmt):
        if self.parallel and self._varies(s.value):
            self.parallel.add(s.var)
        if not dt.is_int4(s.var.dtype):
            return self.generic_visit(s)
        self.renamed[s.var] = v = Var(carrier(s.var.dtype), s.var.name)
        return LetStmt(v, self.visit_expr(s.value), self.visit(s.body))

    def _varies(self, e: Expr) -> bool:
        """Whether ``e`` reads a variable of ``self.parallel``."""
        found = []
        post_order_visit(e, lambda x: found.append(x) if isinstance(x, Var)
                         and x in self.parallel else None)
        return bool(found)

    def _shared_byte(self, idx: tuple, p: Buffer) -> bool:
        """Whether another thread may store the other nibble of this store's byte while it
        runs: in a GPU kernel (unless ``p`` is per thread); in a parallel loop when the
        last index depends on a parallel iteration (rows start on whole bytes, and two
        iterations that store one row at the same last index would store one element:
        a race the legality check refuses)."""
        if self.kernel:
            return not thread_private(p.scope)
        return bool(self.parallel) and bool(idx) and self._varies(idx[-1])

    def visit_Allocate(self, s: Allocate):
        out = self.generic_visit(s)
        p = self.packed.get(id(s.buffer))
        return out if p is None else Allocate(p, out.body)

    def visit_TensorCall(self, s: TensorCall):
        for b in s.buffers:
            if id(b) in self.packed:
                raise LoweringError(format_error(
                    "int4", f"{b.dtype} tensor {b.name!r} is an operand of tensor intrinsic "
                    f"{s.intrin.name!r}", "int4 tensors read and written element by element",
                    hint="give the intrinsic int8 operands"))
        return self.generic_visit(s)

    def visit_Store(self, s: Store):
        p = self.packed.get(id(s.buffer))
        if p is None:
            return self.generic_visit(s)
        val = s.value
        if isinstance(val, Cast) and val.dtype == s.buffer.dtype:
            val = val.value    # legalize_int4's conversion: already in range
        v = self.visit_expr(val)
        v = Binary("uint8", "bitand", v if v.dtype == "uint8" else Cast("uint8", v),
                   _c("uint8", 15))
        idx = tuple(self.visit_expr(i) for i in s.indices)
        atomic = self._shared_byte(idx, p)
        if idx:
            byte, shift = _nibble(idx[-1])
            idx = idx[:-1] + (byte,)
        else:
            shift = _c("int64", 0)
        if atomic:
            from .storage import _flat_index   # the row-major offset flattening computes

            ptr = AccessPtr("handle", p, _flat_index(p, idx)[0] if idx else _c("int64", 0),
                            "rw")
            return Evaluate(ExternCall("void", NIBBLE_STORE, (ptr, Cast("uint8", shift), v),
                                       "atomic"))
        sh = Cast("uint8", shift)
        keep = Binary("uint8", "bitxor", Binary("uint8", "shl", _c("uint8", 15), sh),
                      _c("uint8", 255))
        old = Binary("uint8", "bitand", Load("uint8", p, idx), keep)
        return Store(p, idx, Binary("uint8", "bitor", old, Binary("uint8", "shl", v, sh)))


def _i64(e: Expr) -> Expr:
    return e if e.dtype == "int64" else Cast("int64", e)


def _fold(e: Expr) -> Expr:
    return _c("int64", int(e.value)) if isinstance(e, Const) else _i64(e)


def _add(a: Expr, b: Expr) -> Expr:
    if isinstance(a, Const) and isinstance(b, Const):
        return _c("int64", int(a.value) + int(b.value))
    if isinstance(b, Const) and b.value == 0:
        return _i64(a)
    if isinstance(a, Const) and a.value == 0:
        return _i64(b)
    return Binary("int64", "add", _i64(a), _i64(b))


def _sub(a: Expr, b: Expr) -> Expr:
    if isinstance(a, Const) and isinstance(b, Const):
        return _c("int64", int(a.value) - int(b.value))
    if isinstance(b, Const) and b.value == 0:
        return _i64(a)
    return Binary("int64", "sub", _i64(a), _i64(b))


def _shr1(e: Expr) -> Expr:
    if isinstance(e, Const):
        return _c("int64", int(e.value) >> 1)
    return Binary("int64", "shr", e, _c("int64", 1))


def _ne0(e: Expr) -> Expr:
    return Cmp("bool", "ne", e, _c("int64", 0))


def _gt0(e: Expr) -> Expr:
    return Cmp("bool", "gt", e, _c("int64", 0))


def _and(a: Expr, b: Expr) -> Expr:
    return And("bool", a, b)


def _conjuncts(e: Expr) -> list:
    if isinstance(e, And):
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _split_guard(cond: Expr, v: Var) -> tuple | None:
    """``(guard, bound)`` with ``cond`` equivalent to ``guard and v < bound`` (an int64
    expression free of ``v``): ``guard`` the conjuncts of ``cond`` free of ``v`` (None if
    there are none), ``bound`` from the one conjunct that reads ``v``, ``x + v <= c`` /
    ``< c`` or ``c >= x + v`` / ``> c``. None for any other use of ``v``."""
    free, bound = [], None
    for c in _conjuncts(cond):
        if not _reads(c, v):
            free.append(c)
            continue
        if bound is not None or not isinstance(c, Cmp):
            return None
        if _reads(c.a, v) and not _reads(c.b, v) and c.op in ("le", "lt"):
            idx, lim, incl = c.a, c.b, c.op == "le"
        elif _reads(c.b, v) and not _reads(c.a, v) and c.op in ("ge", "gt"):
            idx, lim, incl = c.b, c.a, c.op == "ge"
        else:
            return None
        off = _offset_of(idx, v)
        if off is None:
            return None
        top = _add(lim, _c("int64", 1)) if incl else _i64(lim)
        bound = top if isinstance(off, Const) and off.value == 0 else _sub(top, off)
    if bound is None:
        return None
    guard = None
    for c in free:
        guard = c if guard is None else And("bool", guard, c)
    return guard, bound


def _reads(e: Expr, v: Var) -> bool:
    found = []
    post_order_visit(e, lambda x: found.append(x) if x is v else None)
    return bool(found)


def _loads(e: Expr) -> list:
    out: list = []
    post_order_visit(e, lambda x: out.append(x) if isinstance(x, Load) else None)
    return out


def _offset_of(e: Expr, v: Var) -> Expr | None:
    """``b`` where ``e`` is ``v`` (``b = 0``) or ``b + v``/``v + b`` with ``b`` free of
    ``v``; else None."""
    if e is v:
        return _c("int64", 0)
    if isinstance(e, Binary) and e.op == "add":
        if e.b is v and not _reads(e.a, v):
            return e.a
        if e.a is v and not _reads(e.b, v):
            return e.b
    return None


def _even(e: Expr) -> bool:
    """Whether integer ``e`` is even for all values of its variables (a sufficient test:
    even constants, products with an even constant, sums and differences of even
    terms)."""
    if isinstance(e, Const):
        return int(e.value) % 2 == 0
    if isinstance(e, Cast):
        return dt.is_int(e.value.dtype) and _even(e.value)
    if isinstance(e, Binary) and e.op == "mul":
        return any(isinstance(x, Const) and int(x.value) % 2 == 0 for x in (e.a, e.b)) or (
            _even(e.a) or _even(e.b))
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        return _even(e.a) and _even(e.b)
    return False


def pack_int4(func: PrimFunc) -> PrimFunc:
    """Store every ``int4``/``uint4`` buffer of ``func`` two elements per byte (see the
    module docstring); parameters become ``uint8`` buffers of the packed shape. Returns
    ``func`` itself when it has none.

    Raises
    ------
    LoweringError
        For an ``int4`` buffer with a symbolic last extent, or one that a tensor intrinsic
        or ``te.extern`` reads or writes.
    """
    from .storage import _buffers_used

    params = {id(p) for p in func.params if isinstance(p, Buffer)}
    bufs = [p for p in func.params if isinstance(p, Buffer)] + _buffers_used(func.body)
    packed = {id(b): _packed(b, id(b) in params) for b in bufs if dt.is_int4(b.dtype)}
    if not packed:
        return func
    body = _Pack(packed).visit(func.body)
    new_params = tuple(packed.get(id(p), p) if isinstance(p, Buffer) else p
                       for p in func.params)
    return PrimFunc(func.name, new_params, body, func.attrs)
