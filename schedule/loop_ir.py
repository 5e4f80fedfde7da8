"""The loop IR: what lowering produces and what the targets consume.

Meaning of the IR, stated once:

* Expressions are the nodes of :mod:`polytile.te.expr` plus :class:`Load`; ``TensorRead``
  and ``Reduce`` never appear after lowering.
* Loop iterators and all index arithmetic are ``int64`` (two's complement, wrapping).
  (The CUDA backend narrows them to ``int32`` where interval bounds prove they fit.)
* ``For(var, min, extent, step)`` runs ``var = min, min+step, ...`` while
  ``var < min + extent``; ``extent`` may be an expression, ``step`` is a positive int.
  ``kind`` is ``serial``, ``parallel`` (iterations may run concurrently on CPU threads),
  ``vectorized`` (iterations run as SIMD lanes) or ``unrolled``.
* ``Load``/``Store`` index a :class:`Buffer`. Before storage flattening they carry one
  index per dimension; afterwards exactly one, the row-major element offset.
* ``Allocate(buffer, body)`` gives ``buffer`` storage for the duration of ``body``; its
  contents start undefined. ``scope`` is where it lives: ``global`` (a function argument),
  ``heap``, ``stack``, and on GPUs ``shared`` and ``local``.
* ``Seq`` runs statements in order (``seq()``, the empty ``Seq``, is the statement that
  does nothing); ``IfThenElse`` runs one branch; ``LetStmt`` binds a variable for its body.
  Every statement field holds a statement, never ``None`` (only ``else_case`` may be
  absent): the constructors check it, so a pass that drops a body must say ``seq()``.
* A :class:`PrimFunc` is one function: buffers and scalar variables as parameters.
* GPU code: a :class:`KernelLaunch` runs its body once per thread of a ``grid`` of blocks
  of ``block`` threads; inside it, the variables of ``thread_vars`` hold ``blockIdx.*`` /
  ``threadIdx.*`` (``int64``). Kernels of one function run in order, each finishing
  before the next starts. ``Sync`` is a barrier of all threads of a block (CUDA
  ``__syncthreads()``); ``shared`` buffers are per block, ``local`` per thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from polytile.errors import InternalError
from polytile.te.depth import deep
from polytile.te.expr import Const, Expr, Var, register_node
from polytile.te.fastinit import fast_init
from polytile.te.printer import ExprPrinter
from polytile.te.visitor import replace_node

from .kinds import LoopKind


@dataclass(frozen=True, slots=True, eq=False)
class Buffer:
    """A named array: ``shape`` in elements, ``dtype``, storage ``scope``.

    ``swizzle`` (``"none"``, or ``"128B"``/``"64B"``/``"32B"`` for shared buffers set by
    ``Stage.swizzle``): indices stay logical (row-major) everywhere in the loop IR, and the
    element at logical flat offset ``o`` is stored at
    :func:`polytile.targets.cuda.wgmma.swizzle_elements` ``(o)`` -- the interpreter and the
    C printer apply it to every load and store; an :class:`AccessPtr` is the logical
    address (what a wgmma descriptor takes, the hardware applying the swizzle).

    ``packs`` is ``"int4"``/``"uint4"`` for the ``uint8`` buffer that holds a tensor of
    that dtype packed two elements per byte (:mod:`polytile.schedule.passes.int4`), else
    ``""``; only error messages read it."""

    name: str
    shape: tuple
    dtype: str
    scope: str = "global"
    swizzle: str = "none"
    packs: str = ""

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __repr__(self) -> str:
        sw = "" if self.swizzle == "none" else f", swizzle={self.swizzle}"
        return f"Buffer({self.name}, {self.dtype}{list(self.shape)}, {self.scope}{sw})"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Load(Expr):
    """``buffer[indices]``; ``dtype`` equals ``buffer.dtype``."""

    buffer: Buffer
    indices: tuple


register_node(Load, ("indices",))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class ExternCall(Expr):
    """A call with side effects or outside polytile's math: ``kind`` is ``extern`` (a C
    function, resolved when the module is loaded), ``pure_extern`` (the same, without side
    effects), ``llvm_intrin`` (an LLVM intrinsic such as ``llvm.fma.f32``), ``intrin``
    (a builtin of the target's C dialect) or ``atomic`` (an atomic update of memory that
    every backend implements: ``nibble_store``, see :mod:`polytile.schedule.passes.int4`).
    Arguments are scalars or :class:`AccessPtr`.
    Built by :mod:`polytile.tir` inside the body of a tensor intrinsic."""

    name: str
    args: tuple
    kind: str = "extern"


register_node(ExternCall, ("args",))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class AccessPtr(Expr):
    """The address of element ``offset`` (a flat element offset, ``int64``) of ``buffer``:
    a pointer to its element type (``dtype`` is ``"handle"``); ``mode`` is ``"r"``,
    ``"w"`` or ``"rw"`` (TVM's ``access_ptr``), for documentation and C ``const``."""

    buffer: "Buffer"
    offset: Expr
    mode: str = "rw"


register_node(AccessPtr, ("offset",))


@dataclass(frozen=True, slots=True, eq=False)
class Stmt:
    """Base class of statements."""

    def __str__(self) -> str:
        return stmt_str(self)


def _require_stmt(node: Stmt, name: str, value) -> None:
    """Refuse a statement field that is not a statement (a pass returned ``None`` where a
    body was expected): caught where the node is built, not in a printer later."""
    if not isinstance(value, Stmt):
        raise InternalError(f"loop IR: {type(node).__name__}.{name} must be a statement, "
                            f"got {type(value).__name__}; use seq() for an empty body")


@dataclass(frozen=True, slots=True, eq=False)
class Store(Stmt):
    buffer: Buffer
    indices: tuple
    value: Expr


#: The kinds a ``For`` may have (a string equal to one of them is accepted too).
FOR_KINDS = tuple(LoopKind)


@dataclass(frozen=True, slots=True, eq=False)
class For(Stmt):
    var: Var
    min: Expr
    extent: Expr
    kind: str
    body: Stmt
    step: int = 1
    pragmas: tuple = ()

    def __post_init__(self):
        _require_stmt(self, "body", self.body)


@dataclass(frozen=True, slots=True, eq=False)
class IfThenElse(Stmt):
    cond: Expr
    then_case: Stmt
    else_case: Stmt | None = None

    def __post_init__(self):
        _require_stmt(self, "then_case", self.then_case)
        if self.else_case is not None:
            _require_stmt(self, "else_case", self.else_case)


@dataclass(frozen=True, slots=True, eq=False)
class Seq(Stmt):
    stmts: tuple

    def __post_init__(self):
        # (one check for the thousand statements of an unrolled kernel, rebuilt by each pass)
        if not all([isinstance(x, Stmt) for x in self.stmts]):
            for x in self.stmts:
                _require_stmt(self, "stmts", x)


@dataclass(frozen=True, slots=True, eq=False)
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt

    def __post_init__(self):
        _require_stmt(self, "body", self.body)


@dataclass(frozen=True, slots=True, eq=False)
class While(Stmt):
    """``while cond: body``, ``cond`` re-evaluated before each iteration (TVM's
    ``tir.While``). Only the code of ``te.extern`` and tensor intrinsics holds it
    (``ir_builder.while_loop``): lowering makes no loop of this kind, and no pass reasons
    about its trip count, which the body's stores to memory decide."""

    cond: Expr
    body: Stmt

    def __post_init__(self):
        _require_stmt(self, "body", self.body)


@dataclass(frozen=True, slots=True, eq=False)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt

    def __post_init__(self):
        _require_stmt(self, "body", self.body)


@dataclass(frozen=True, slots=True, eq=False)
class Assert(Stmt):
    """Stop the function with an error carrying ``message`` when ``cond`` is false
    (run-time checks lowering cannot prove, e.g. bounds of data-dependent indices);
    ``error`` names the Python exception a CPU target raises."""

    cond: Expr
    message: str
    error: str = "IndexError"


@dataclass(frozen=True, slots=True, eq=False)
class Evaluate(Stmt):
    """Evaluate an expression for its side effects (none today; a no-op placeholder)."""

    value: Expr


@dataclass(frozen=True, slots=True, eq=False)
class TensorCall(Stmt):
    """One call of tensor intrinsic ``intrin`` (``part`` is ``body``, ``reset`` or
    ``update``) on regions of ``buffers`` (the intrinsic's inputs, then its outputs).

    Operand ``k`` is the strided view of ``buffers[k]`` of shape ``shapes[k]`` (the
    intrinsic's tensor) whose first element is at ``indices`` (one index per buffer
    dimension before storage flattening, then one flat element offset per operand,
    concatenated in operand order) with element strides ``strides[k]``. Its meaning is
    the intrinsic's compute definition on those views (what the reference interpreter
    runs); ``body`` is its code (``fcompute``'s statement), filled in by storage
    flattening, empty before."""

    intrin: object
    part: str
    buffers: tuple
    shapes: tuple
    strides: tuple
    indices: tuple
    body: Stmt

    def output_buffers(self) -> tuple:
        """The buffers the call writes: the intrinsic's outputs (one, or one per dtype of a
        ``te.extern`` of several), after its inputs."""
        return self.buffers[len(self.intrin.inputs):]

    def __post_init__(self):
        _require_stmt(self, "body", self.body)

    def operand_indices(self) -> list[tuple]:
        """The start indices of each operand (split of ``indices``)."""
        flat = len(self.indices) == len(self.buffers)
        out, k = [], 0
        for b in self.buffers:
            n = 1 if flat else len(b.shape)
            out.append(tuple(self.indices[k:k + n]))
            k += n
        return out


@dataclass(frozen=True, slots=True, eq=False)
class KernelLaunch(Stmt):
    """A GPU kernel: ``grid`` and ``block`` are ``(x, y, z)`` extents (ints);
    ``thread_vars`` pairs each used hardware index variable with its tag, e.g.
    ``(Var("int64", "blockIdx.x"), "blockIdx.x")``. ``min_blocks`` (0: none): the blocks
    of the kernel that should fit on one SM at once (CUDA's ``__launch_bounds__(threads,
    min_blocks)``: ptxas caps the registers per thread to fit them), from the
    ``"min_blocks"`` pragma of the kernel's root stage."""

    name: str
    grid: tuple
    block: tuple
    thread_vars: tuple
    body: Stmt
    min_blocks: int = 0

    def __post_init__(self):
        _require_stmt(self, "body", self.body)


@dataclass(frozen=True, slots=True, eq=False)
class Sync(Stmt):
    """Barrier of the threads of one block; ``scope`` is ``"shared"``."""

    scope: str = "shared"


@dataclass(frozen=True, slots=True, eq=False)
class WarpShuffle(Stmt):
    """``buffer[indices] = value`` read from another lane of the warp: the thread whose
    lane is this thread's lane XOR ``lane_xor`` (CUDA's ``__shfl_xor_sync(mask, value,
    lane_xor)``; lanes are the block's linear thread ids modulo 32). A warp-level
    exchange: like :class:`Sync` it must be reached by every thread of the block (code
    uniform over the block), and ``mask`` names the lanes taking part (all of each warp's
    existing lanes). Built by :mod:`polytile.schedule.passes.warp_reduce`."""

    buffer: Buffer
    indices: tuple
    value: Expr
    lane_xor: int
    mask: int = 0xFFFFFFFF


# built tens of thousands of times per lowering (see polytile.te.fastinit)
for _cls in (Buffer, Load, ExternCall, AccessPtr, Store, For, IfThenElse, Seq, LetStmt,
             Allocate, Assert, Evaluate, TensorCall, KernelLaunch, Sync, WarpShuffle):
    fast_init(_cls)


@dataclass(frozen=True, eq=False)
class PrimFunc:
    """A function: ``params`` are :class:`Buffer` (arrays) or :class:`Var` (scalars)."""

    name: str
    params: tuple
    body: Stmt
    attrs: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return func_str(self)

    __repr__ = __str__


_STMT_CHILDREN = {
    Store: ("value", "indices"), For: ("min", "extent", "body"),
    IfThenElse: ("cond", "then_case", "else_case"), Seq: ("stmts",),
    LetStmt: ("value", "body"), While: ("cond", "body"), Allocate: ("body",), Evaluate: ("value",),
    KernelLaunch: ("body",), Sync: (), WarpShuffle: ("value", "indices"), Assert: ("cond",), TensorCall: ("indices", "body"),
}


_STMT_REVERSED = {k: tuple(reversed(v)) for k, v in _STMT_CHILDREN.items()}
#: The statement classes without sub-statements.
_LEAF_STMTS = frozenset({Store, Evaluate, Sync, WarpShuffle, Assert})


def asserts(s: Stmt) -> list:
    """The ``Assert`` statements of ``s`` in pre-order (a target numbers its failures by
    position in this list)."""
    return [x for x in walk_stmts(s) if isinstance(x, Assert)]


def is_empty(s: Stmt) -> bool:
    """True for the statement that does nothing (``seq()``)."""
    return isinstance(s, Seq) and not s.stmts


def seq(*stmts) -> Stmt:
    """A sequence with nested sequences flattened (one statement is returned as is)."""
    flat: list = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return Seq(tuple(flat))


# traversal -----------------------------------------------------------------------------


class StmtFunctor:
    """Statement dispatch, written once for every walker of the loop IR (the visitor and
    mutator below, the printer, the reference interpreter, the code generators):
    ``visit(s, *args)`` calls the ``visit_<Class>`` method of the statement's class with
    the same arguments, or ``generic_visit`` when the walker has none (by default an
    error naming the statement). Methods are looked up once per walker class and
    statement class (Halide's ``IRVisitor``, TVM's ``StmtFunctor``)."""

    _methods: dict = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._methods = {}

    def visit(self, s, *args):
        fn = self._methods.get(type(s))
        if fn is None:
            fn = getattr(type(self), "visit_" + type(s).__name__, None)
            fn = self._methods[type(s)] = fn or type(self).generic_visit
        return fn(self, s, *args)

    def generic_visit(self, s, *args):
        raise TypeError(f"{type(self).__name__}: unsupported statement {type(s).__name__}")


class StmtVisitor(StmtFunctor):
    """Visits statements (``visit_<Class>``) and, through ``visit_expr``, expressions."""

    def visit_expr(self, e: Expr) -> None:
        pass

    def generic_visit(self, s) -> None:
        for f in _STMT_CHILDREN[type(s)]:
            v = getattr(s, f)
            for x in (v if isinstance(v, tuple) else (v,)):
                if isinstance(x, Stmt):
                    self.visit(x)
                elif isinstance(x, Expr):
                    self.visit_expr(x)


class StmtMutator(StmtFunctor):
    """Rewrites statements; returns the same object when nothing changed.

    A ``visit_<Class>`` may return ``None`` to remove a statement: it disappears from a
    ``Seq``, an ``else_case`` becomes absent, and any other body becomes ``seq()``.

    Override ``visit_<Class>`` for statements and ``visit_expr`` for expressions.
    """

    _skips_leaves = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # a mutator of statements alone leaves every statement without sub-statements as
        # it is (the thousand stores of an unrolled kernel, met by a dozen such passes)
        cls._skips_leaves = cls.visit_expr is StmtMutator.visit_expr

    def visit_expr(self, e: Expr) -> Expr:
        return e

    def generic_visit(self, s):
        # (every pass walks every statement: the element visits are written out inline)
        if self._skips_leaves and type(s) in _LEAF_STMTS:
            return s
        visit, visit_expr = self.visit, self.visit_expr
        if s.__class__ is Store and isinstance(s.value, Expr):
            # the thousand stores of an unrolled kernel: the loop below for a store, fields
            # in the same order (the value, then the indices)
            value = visit_expr(s.value)
            if value is None:
                value = seq()
            old = s.indices
            idx = [visit(x) if isinstance(x, Stmt) else visit_expr(x)
                   if isinstance(x, Expr) else x for x in old]
            for a, b in zip(idx, old):
                if a is not b:
                    return Store(s.buffer, tuple([x for x in idx if x is not None]), value)
            return s if value is s.value else Store(s.buffer, old, value)
        changes = None
        for f in _STMT_CHILDREN[type(s)]:
            v = getattr(s, f)
            if isinstance(v, tuple):
                nv = [visit(x) if isinstance(x, Stmt) else visit_expr(x)
                      if isinstance(x, Expr) else x for x in v]
                for a, b in zip(nv, v):
                    if a is not b:
                        # a visit returning None removes the statement from a sequence
                        changes = changes or {}
                        changes[f] = tuple([x for x in nv if x is not None])
                        break
            elif v is not None:
                nv = self._one(v)
                if nv is None and f != "else_case":
                    nv = seq()    # a removed body leaves a body that does nothing
                if nv is not v:
                    changes = changes or {}
                    changes[f] = nv
        if changes is None:
            return s
        out = replace_node(s, changes)
        if isinstance(out, Seq):
            return seq(*out.stmts)
        return out

    def _one(self, x):
        if isinstance(x, Stmt):
            return self.visit(x)
        if isinstance(x, Expr):
            return self.visit_expr(x)
        return x


class SlotExprMutator(StmtMutator):
    """A ``StmtMutator`` whose expressions are rewritten by one expression walker per
    *slot*, the position of an expression among the expressions of its statement (a
    ``Store``'s indices, then its value), each walker kept for the whole walk.

    A memoizing expression walker (:class:`polytile.te.visitor.ExprMutator`) maps a node
    met twice to one result. A walker per expression keeps the sharing structure within
    each statement as it was, but repeats the work on the nodes that the copies of an
    unrolled body share; one walker for everything would also merge nodes of different
    expressions of one statement that were distinct (where a rewrite returns an operand),
    which ``share_subexpressions`` would then bind to a variable. One walker per slot
    does neither: two expressions of one statement never share a walker, and the copies
    of a statement share the work. Subclasses implement :meth:`walker`."""

    def walker(self):
        """A new expression walker (an object with ``visit(expr)``)."""
        raise NotImplementedError

    def visit(self, s, *args):
        saved = getattr(self, "_slot", 0)
        self._slot = 0
        try:
            return StmtMutator.visit(self, s, *args)
        finally:
            self._slot = saved

    def visit_expr(self, e: Expr) -> Expr:
        k = self._slot
        self._slot = k + 1
        try:
            walkers = self._walkers
        except AttributeError:
            walkers = self._walkers = []
        if k == len(walkers):
            walkers.append(self.walker())
        return walkers[k].visit(e)


def child_stmts(s: Stmt) -> list:
    """The direct sub-statements of ``s``."""
    out = []
    for f in _STMT_CHILDREN[type(s)]:
        v = getattr(s, f)
        out += [x for x in (v if isinstance(v, tuple) else (v,)) if isinstance(x, Stmt)]
    return out


def walk_stmts(s: Stmt):
    """Yield every statement of ``s`` in pre-order."""
    # a stack, not nested generators: each statement of an unrolled kernel (thousands in
    # a sequence) was handed up through every enclosing generator
    stack = [s]
    pop, push, children = stack.pop, stack.append, _STMT_REVERSED
    while stack:
        x = pop()
        yield x
        for f in children[type(x)]:   # reversed: the first child is popped first
            v = getattr(x, f)
            if v.__class__ is tuple:
                stack.extend([c for c in reversed(v) if isinstance(c, Stmt)])
            elif isinstance(v, Stmt):
                push(v)


def stmt_exprs(s: Stmt):
    """Yield the expressions held directly by statement ``s`` (not by its sub-statements)."""
    for f in _STMT_CHILDREN[type(s)]:
        v = getattr(s, f)
        for x in (v if isinstance(v, tuple) else (v,)):
            if isinstance(x, Expr):
                yield x


# printing ------------------------------------------------------------------------------


class _IRPrinter(ExprPrinter):
    def print_Const(self, e) -> str:
        # indices are int64 throughout the loop IR: print them bare
        if e.dtype == "int64":
            return str(e.value)
        return super().print_Const(e)

    def print_Load(self, e: Load) -> str:
        return f"{e.buffer.name}[{', '.join(self.print(i) for i in e.indices)}]"

    def print_ExternCall(self, e: ExternCall) -> str:
        return f"{e.kind}:{e.name}({', '.join(self.print(a) for a in e.args)})"

    def print_AccessPtr(self, e: AccessPtr) -> str:
        return f"&{e.buffer.name}[{self.print(e.offset)}]"


_P = _IRPrinter()


@deep("print")
def expr_str(e: Expr) -> str:
    """Text of an expression that may contain :class:`Load`."""
    return _P(e)


def _range_str(s: For) -> str:
    lo, ext = _P(s.min), _P(s.extent)
    if isinstance(s.min, Const) and isinstance(s.extent, Const):
        hi = str(s.min.value + s.extent.value)
    elif isinstance(s.min, Const) and s.min.value == 0:
        hi = ext
    else:
        hi = f"{lo} + {ext}"
    step = f", {s.step}" if s.step != 1 else ""
    return f"{lo}, {hi}{step}"


class _Printer(StmtFunctor):
    """The text of statements: ``visit(s, indent, out)`` appends lines to ``out``."""

    def visit_Seq(self, s: Seq, ind: str, out: list) -> None:
        for x in s.stmts:
            self.visit(x, ind, out)

    def visit_For(self, s: For, ind: str, out: list) -> None:
        name = {LoopKind.SERIAL: "range"}.get(s.kind, s.kind)
        prag = "".join(f"  # pragma {p}" for p in s.pragmas)
        out.append(f"{ind}for {s.var.name} in {name}({_range_str(s)}):{prag}")
        self.visit(s.body, ind + "  ", out)

    def visit_IfThenElse(self, s: IfThenElse, ind: str, out: list) -> None:
        out.append(f"{ind}if {_P(s.cond)}:")
        self.visit(s.then_case, ind + "  ", out)
        if s.else_case is not None:
            out.append(f"{ind}else:")
            self.visit(s.else_case, ind + "  ", out)

    def visit_Store(self, s: Store, ind: str, out: list) -> None:
        out.append(f"{ind}{s.buffer.name}[{', '.join(_P(i) for i in s.indices)}] = "
                   f"{_P(s.value)}")

    def visit_While(self, s: While, ind: str, out: list) -> None:
        out.append(f"{ind}while {_P(s.cond)}:")
        self.visit(s.body, ind + "  ", out)

    def visit_LetStmt(self, s: LetStmt, ind: str, out: list) -> None:
        out.append(f"{ind}{s.var.name} = {_P(s.value)}")
        self.visit(s.body, ind, out)

    def visit_Allocate(self, s: Allocate, ind: str, out: list) -> None:
        b = s.buffer
        sw = "" if b.swizzle == "none" else f", swizzle={b.swizzle!r}"
        out.append(f"{ind}{b.name} = alloc({b.dtype}{list(b.shape)}, scope={b.scope!r}{sw})")
        self.visit(s.body, ind, out)

    def visit_Evaluate(self, s: Evaluate, ind: str, out: list) -> None:
        out.append(f"{ind}{_P(s.value)}")

    def visit_KernelLaunch(self, s: KernelLaunch, ind: str, out: list) -> None:
        mb = f", min_blocks={s.min_blocks}" if s.min_blocks else ""
        out.append(f"{ind}launch {s.name}(grid={list(s.grid)}, block={list(s.block)}{mb}):")
        self.visit(s.body, ind + "  ", out)

    def visit_Sync(self, s: Sync, ind: str, out: list) -> None:
        out.append(f"{ind}sync({s.scope!r})")

    def visit_WarpShuffle(self, s: WarpShuffle, ind: str, out: list) -> None:
        idx = ", ".join(_P(i) for i in s.indices)
        out.append(f"{ind}{s.buffer.name}[{idx}] = shfl_xor({_P(s.value)}, "
                   f"{s.lane_xor}, mask={s.mask:#x})")

    def visit_TensorCall(self, s: TensorCall, ind: str, out: list) -> None:
        ops = []
        for b, shape, idx in zip(s.buffers, s.shapes, s.operand_indices()):
            ops.append(f"{b.name}[{', '.join(_P(i) for i in idx)}]"
                       f"{{{'x'.join(map(str, shape)) or 'scalar'}}}")
        out.append(f"{ind}tensorize {s.intrin.name}.{s.part}({', '.join(ops)})"
                   + (":" if not is_empty(s.body) else ""))
        if not is_empty(s.body):
            self.visit(s.body, ind + "  ", out)

    def visit_Assert(self, s: Assert, ind: str, out: list) -> None:
        out.append(f"{ind}assert {_P(s.cond)}, {s.message!r}")

    def generic_visit(self, s, *args) -> None:
        raise TypeError(f"no printer for {type(s).__name__}")


_PRINTER = _Printer()


@deep("print")
def stmt_str(s: Stmt, indent: str = "") -> str:
    """Deterministic text of a statement."""
    out: list[str] = []
    _PRINTER.visit(s, indent, out)
    return "\n".join(out)


def func_str(f: PrimFunc) -> str:
    """Deterministic text of a function: a signature line, then the indented body."""
    ps = []
    bound = f.attrs.get("size_params", ())
    implicit = {id(v) for v, _, _ in bound}
    for p in f.params:
        if isinstance(p, Buffer):
            ps.append(f"{p.name}: {p.dtype}{list(p.shape)}")
        elif id(p) not in implicit:
            ps.append(f"{p.name}: {p.dtype}")
    head = [f"def {f.name}({', '.join(ps)}):"]
    # symbolic sizes: where each gets its value, and what lowering assumed of them
    head += [f"  # {v.name}: {v.dtype} = {f.params[k].name}.shape[{q}]" for v, k, q in bound]
    for e, who in f.attrs.get("size_checks", ()):
        head.append(f"  # assume {e} >= 0 ({who}; checked at each call)")
    return "\n".join(head) + "\n" + stmt_str(f.body, "  ")
