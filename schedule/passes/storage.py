"""Storage passes: allocation of intermediate buffers and flattening to 1-D offsets."""

from __future__ import annotations

from polytile.backend import DeviceLimits
from polytile.te import dtype as dt
from polytile.te import symbolic as sym
from polytile.te.expr import Binary, Cast, Const, Expr
from polytile.te.visitor import ExprMutator, collect, collect_into

from ..kinds import LoopKind, thread_private
from ..loop_ir import (AccessPtr, Allocate, Buffer, For, KernelLaunch, LetStmt, Load, PrimFunc,
                       Stmt, StmtMutator, Store, TensorCall, child_stmts, stmt_exprs, walk_stmts)
from ..tensorize import lower_tensor_call


#: The results of :func:`_buffers_used` by statement id (each entry holds its statement, so
#: the id is not reused): ``allocate_intermediates`` asks for a kernel's body, which
#: ``pack_int4`` meets again inside the allocated function. The order of first use is
#: compositional, so a walk takes a known subtree's list as it is. Emptied by
#: :func:`forget` when a lowering ends.
_USED: dict = {}


def forget() -> None:
    """Empty the memo of this module (``lower`` calls it when a lowering ends)."""
    _USED.clear()


def _buffers_used(s: Stmt, launches: dict | None = None) -> list[Buffer]:
    """The buffers ``s`` stores to, calls or loads from, in order of first use. With
    ``launches``, also the list of each ``KernelLaunch`` inside, by ``id`` (one walk for
    the function and its kernels)."""
    out: dict[int, Buffer] = {}
    done: set[int] = set()    # expression nodes walked: shared indices are walked once
    loads: list = []
    stack = [s]
    pop = stack.pop
    known = _USED if launches is None else {}   # (a known kernel's launch is not listed)
    while stack:
        x = pop()
        hit = known.get(id(x))
        if hit is not None and hit[0] is x:
            for b in hit[1]:
                out.setdefault(id(b), b)
            continue
        if x.__class__ is Store:
            # (most statements of an unrolled kernel: stmt_exprs and child_stmts inline)
            out.setdefault(id(x.buffer), x.buffer)
            if isinstance(x.value, Expr):
                collect_into(x.value, Load, loads, done)
            for e in x.indices:
                if isinstance(e, Expr):
                    collect_into(e, Load, loads, done)
            if loads:
                for ld in loads:
                    out.setdefault(id(ld.buffer), ld.buffer)
                loads.clear()
            continue
        if launches is not None and isinstance(x, KernelLaunch):
            inner = launches[id(x)] = _buffers_used(x.body)
            for b in inner:
                out.setdefault(id(b), b)
            continue
        if isinstance(x, TensorCall):
            for b in x.buffers:
                out.setdefault(id(b), b)
        for e in stmt_exprs(x):
            collect_into(e, Load, loads, done)
        if loads:
            for ld in loads:
                out.setdefault(id(ld.buffer), ld.buffer)
            loads.clear()
        stack.extend(reversed(child_stmts(x)))
    res = list(out.values())
    _USED[id(s)] = (s, res)
    return res


def allocate_intermediates(func: PrimFunc, limits: DeviceLimits) -> PrimFunc:
    """Give every non-argument buffer an ``Allocate``.

    A buffer used only inside parallel loops is allocated in the body of each of them, so
    each thread gets its own copy (privatisation of compute_at buffers); so is a buffer
    whose every parallel loop holds both its stage and that stage's consumer (a stage
    computed inside the parallel loop), which also gets a function-level copy for its uses
    outside parallel loops (the same attach point in tiles isolated from the parallel
    part, such as a ragged last row block); any other buffer is allocated for the whole
    function. Scope: ``stack`` or ``heap``. The stack holds
    buffers of at most ``limits.stack_buffer_bytes`` each, within a budget of
    ``limits.stack_frame_bytes`` per frame: one for the function, one for each parallel
    loop (its body runs on OpenMP threads, whose stacks may be smaller); smallest buffers
    first. Guarantees: no frame puts more than ``limits.stack_frame_bytes`` of
    intermediates on the stack, however many stages are computed inside a loop. On GPUs
    (the function launches kernels) see :func:`_allocate_gpu`.
    """
    params = {id(p) for p in func.params}
    launches: dict = {}
    pending = [b for b in _buffers_used(func.body, launches) if id(b) not in params]
    if not pending:
        return func
    if launches:
        return _allocate_gpu(func, pending, launches)
    par_loops = _outermost_parallel(func.body)
    inside = {id(x): _buffers_used(x.body) for x in par_loops}
    by_loop: dict[int, list] = {}
    private: set[int] = set()   # allocated only inside parallel loops
    also_shared: set[int] = set()  # private in parallel loops, shared by the other uses
    for b in pending:
        loops = [x for x in par_loops if any(y is b for y in inside[id(x)])]
        if not loops:
            continue
        if (sum(_count_uses(x.body, b) for x in loops) == _count_uses(func.body, b)
                and all(_first_access(x.body, b) == "write" and _reads(x.body, b)
                        for x in loops)):
            # every use is inside parallel loops (several after unrolling an outer loop)
            # that each write the buffer before reading it (a stage computed inside them):
            # one private copy per iteration of each. Not so where a loop only writes it
            # or reads it first: values then flow from one parallel loop to another (a
            # reduction's init loop, then its update loop inside a serial reduce loop)
            private.add(id(b))
        elif all(_writes(x.body, b) and _read_by_other(x.body, b) for x in loops):
            # each parallel loop holds both the stage's statements and its consumer's reads,
            # so it encloses the stage's attach point (an attached stage is computed whole
            # within one iteration of its attach loop); the other uses are copies of that
            # attach point outside the parallel loops (tiles isolated from the parallel
            # part) and get the function's copy
            also_shared.add(id(b))
        else:
            continue
        for x in loops:
            by_loop.setdefault(id(x), []).append(b)
    # one stack budget per frame: the function's, and each parallel body's; a buffer
    # private to several parallel loops stays on the stack only if it fits in all of them
    frames = [[b for b in pending if id(b) not in private]] + list(by_loop.values())
    chosen = [{id(b) for b in _fit_stack(bufs, limits)} for bufs in frames]
    refused = {id(b) for bufs, c in zip(frames, chosen) for b in bufs if id(b) not in c}
    on_stack = set().union(*chosen) - refused
    final = {id(b): Buffer(b.name, b.shape, b.dtype, "stack" if id(b) in on_stack else "heap")
             for b in pending}

    class _PlaceInLoops(StmtMutator):
        def visit_For(self, s: For):
            new = self.generic_visit(s)
            bufs = by_loop.get(id(s))
            if not bufs:
                return new
            inner = new.body
            for b in reversed(bufs):
                inner = Allocate(b, inner)
            return For(new.var, new.min, new.extent, new.kind, inner, new.step, new.pragmas)

    body = _PlaceInLoops().visit(func.body)
    for b in reversed([b for b in pending if id(b) not in private]):
        body = Allocate(b, body)
    if final:   # else a walk of every expression that would change nothing
        body = _Rescope(final).visit(body)
    return PrimFunc(func.name, func.params, body, func.attrs)


def _fit_stack(bufs: list, limits: DeviceLimits) -> list:
    """The buffers of one frame that go on the stack: those of at most
    ``limits.stack_buffer_bytes``, smallest first (small buffers gain most from the
    stack), while their sum stays within ``limits.stack_frame_bytes``."""
    out, used = [], 0
    for b in sorted(bufs, key=_nbytes):  # stable: program order among equal sizes
        n = _nbytes(b)
        if n > limits.stack_buffer_bytes or used + n > limits.stack_frame_bytes:
            break
        out.append(b)
        used += n
    return out


def _nbytes(b: Buffer) -> float:
    """Bytes of ``b``; infinite for a shape that depends on symbolic sizes (such a buffer
    goes on the heap, its size computed at run time)."""
    if not all(sym.is_static(d) for d in b.shape):
        return float("inf")
    return b.size * dt.nbytes(b.dtype)


def _allocate_gpu(func: PrimFunc, pending: list, launches: dict) -> PrimFunc:
    """Shared and local buffers live in the kernel that uses them (per block / per
    thread); other intermediates are device memory for the whole call. ``launches``:
    the buffers of each kernel (``_buffers_used``)."""
    in_kernel = [b for b in pending if b.scope == "shared" or thread_private(b.scope)]

    class _Place(StmtMutator):
        def visit_KernelLaunch(self, k: KernelLaunch):
            used = {id(b) for b in launches[id(k)]}
            body = k.body
            for b in reversed([b for b in in_kernel if id(b) in used]):
                body = Allocate(b, body)
            if body is k.body:
                return k
            return KernelLaunch(k.name, k.grid, k.block, k.thread_vars, body)

    body = _Place().visit(func.body)
    final = {}
    for b in pending:
        if not (b.scope == "shared" or thread_private(b.scope)):
            nb = Buffer(b.name, b.shape, b.dtype, "heap")
            final[id(b)] = nb
            body = Allocate(nb, body)
    if final:   # else a walk of every expression that would change nothing
        body = _Rescope(final).visit(body)
    return PrimFunc(func.name, func.params, body, func.attrs)


def _outermost_parallel(s: Stmt) -> list[For]:
    """The parallel loops not nested in another parallel loop, in program order."""
    if isinstance(s, For) and s.kind == LoopKind.PARALLEL:
        return [s]
    return [p for x in child_stmts(s) for p in _outermost_parallel(x)]


def _writes(s: Stmt, b: Buffer) -> bool:
    return any(isinstance(x, Store) and x.buffer is b or
               isinstance(x, TensorCall) and any(y is b for y in x.output_buffers())
               for x in walk_stmts(s))


def _use(x: Stmt, b: Buffer) -> tuple[bool, bool]:
    """Whether statement ``x`` itself (not its sub-statements) reads and writes ``b``. A
    tensor call's ``update`` reads its outputs; an ``access_ptr("w")`` only writes."""
    reads = writes = False
    if isinstance(x, TensorCall):
        outs = x.output_buffers()
        reads = (any(y is b for y in x.buffers[:len(x.buffers) - len(outs)])
                 or x.part == "update" and any(y is b for y in outs))
        writes = any(y is b for y in outs)
    elif isinstance(x, Store):
        writes = x.buffer is b
    for e in stmt_exprs(x):
        for n in collect(e, (Load, AccessPtr)):
            if n.buffer is b:
                if isinstance(n, AccessPtr) and n.mode == "w":
                    writes = True
                else:
                    reads = True
    return reads, writes


def _first_access(s: Stmt, b: Buffer) -> str | None:
    """``"read"`` or ``"write"``: what the first statement of ``s`` in execution order that
    uses ``b`` does with it (a statement's reads come before its store); ``None`` where no
    statement uses it."""
    for x in walk_stmts(s):
        reads, writes = _use(x, b)
        if reads or writes:
            return "read" if reads else "write"
    return None


def _reads(s: Stmt, b: Buffer) -> bool:
    return any(_use(x, b)[0] for x in walk_stmts(s))


def _read_by_other(s: Stmt, b: Buffer) -> bool:
    """Whether a statement of ``s`` that does not store to ``b`` loads from it (the reads
    of a consumer, as opposed to a reduction reading its own buffer). A ``LetStmt`` whose
    body stores to ``b`` belongs to ``b``'s own update: a tuple reduction computes every
    output's new value from all the accumulators first (argmax's index reads the values'
    buffer), and only its stores follow."""
    for x in walk_stmts(s):
        if isinstance(x, Store) and x.buffer is b:
            continue
        if isinstance(x, LetStmt) and _writes(x.body, b):
            continue
        if isinstance(x, TensorCall):
            if any(y is b for y in x.buffers[:len(x.intrin.inputs)]):
                return True
            continue
        for e in stmt_exprs(x):
            if any(ld.buffer is b for ld in collect(e, Load)):
                return True
    return False


def _count_uses(s: Stmt, b: Buffer) -> int:
    n = 0
    for x in walk_stmts(s):
        if isinstance(x, Store) and x.buffer is b:
            n += 1
        if isinstance(x, TensorCall):
            n += sum(1 for y in x.buffers if y is b)
        for e in stmt_exprs(x):
            n += sum(1 for ld in collect(e, Load) if ld.buffer is b)
    return n


class _RescopeExpr(ExprMutator):
    def __init__(self, final):
        self.final = final

    def visit_Load(self, e: Load):
        idx = tuple(self.visit(i) for i in e.indices)
        b = self.final.get(id(e.buffer), e.buffer)
        if b is e.buffer and all(x is y for x, y in zip(idx, e.indices)):
            return e
        return Load(e.dtype, b, idx)

    def visit_AccessPtr(self, e: AccessPtr):
        off = self.visit(e.offset)
        b = self.final.get(id(e.buffer), e.buffer)
        if b is e.buffer and off is e.offset:
            return e
        return AccessPtr(e.dtype, b, off, e.mode)


class _Rescope(StmtMutator):
    def __init__(self, final):
        self.final = final
        self.ex = _RescopeExpr(final)

    def visit_expr(self, e):
        return self.ex.visit(e)

    def visit_Store(self, s: Store):
        s = self.generic_visit(s)
        b = self.final.get(id(s.buffer), s.buffer)
        return s if b is s.buffer else Store(b, s.indices, s.value)

    def visit_Allocate(self, s: Allocate):
        s = self.generic_visit(s)
        b = self.final.get(id(s.buffer), s.buffer)
        return s if b is s.buffer else Allocate(b, s.body)

    def visit_TensorCall(self, s: TensorCall):
        s = self.generic_visit(s)
        bufs = tuple(self.final.get(id(b), b) for b in s.buffers)
        if all(a is b for a, b in zip(bufs, s.buffers)):
            return s
        return TensorCall(s.intrin, s.part, bufs, s.shapes, s.strides, s.indices, s.body)


def _flat_index(buf: Buffer, indices: tuple) -> tuple:
    if len(indices) == 1:
        return (_i64(indices[0]),)
    off: Expr | None = None
    stride = 1
    for ext, ix in zip(reversed(buf.shape), reversed(indices)):
        if isinstance(stride, int):
            term = _i64(ix) if stride == 1 else Binary("int64", "mul", _i64(ix),
                                                       Const("int64", stride))
        else:
            term = Binary("int64", "mul", _i64(ix), stride)
        off = term if off is None else Binary("int64", "add", term, off)
        e = sym.static(ext)
        if isinstance(stride, int) and e is not None:
            stride *= e
        else:   # a symbolic extent: the stride is computed at run time
            a = Const("int64", stride) if isinstance(stride, int) else stride
            b = Const("int64", e) if e is not None else _i64(sym.as_expr(ext))
            stride = Binary("int64", "mul", a, b)
    return (off if off is not None else Const("int64", 0),)


def _i64(e: Expr) -> Expr:
    return e if e.dtype == "int64" else Cast("int64", e)


class _FlattenExpr(ExprMutator):
    def __init__(self, simplifier=None):
        self.simplifier = simplifier

    def visit_Load(self, e: Load):
        idx = tuple(self.visit(i) for i in e.indices)
        return Load(e.dtype, e.buffer, self.flat(e.buffer, idx))

    def flat(self, buf: Buffer, idx: tuple) -> tuple:
        """The flat index of ``buf`` at ``idx``; simplified when the pass has a simplifier
        (see :func:`flatten_storage`)."""
        flat = _flat_index(buf, idx)
        if self.simplifier is None:
            return flat
        return (self.simplifier.simplified(flat[0]),)


class _Flatten(StmtMutator):
    def __init__(self, simplifier=None):
        # one per pass: its memo lives as long as the pass
        self.ex = _FlattenExpr(simplifier)
        # the flat index of each store's (buffer, index nodes), by identity: the stores of
        # an unrolled kernel (index nodes shared by the copies of its body) share one flat
        # index per element, as their loads do through ``ex``'s memo (one store per
        # statement: no sharing within one)
        self.stores: dict = {}

    def visit_expr(self, e):
        return self.ex.visit(e)

    def visit_Store(self, s: Store):
        # the value, then the indices (the order of generic_visit), one store built
        visit = self.ex.visit
        value = visit(s.value)
        idx = tuple([visit(i) if isinstance(i, Expr) else i for i in s.indices])
        key = (id(s.buffer), tuple([id(i) for i in idx]))
        hit = self.stores.get(key)
        if hit is None:   # (the entry holds the buffer and indices: their ids stay theirs)
            hit = self.stores[key] = (s.buffer, idx, self.ex.flat(s.buffer, idx))
        return Store(s.buffer, hit[2], value)

    def visit_TensorCall(self, s: TensorCall):
        s = self.generic_visit(s)
        flat = tuple(_flat_index(b, idx)[0] for b, idx in zip(s.buffers, s.operand_indices()))
        return lower_tensor_call(s, flat)


def flatten_storage(func: PrimFunc, simplifier=None) -> PrimFunc:
    """Rewrite every multi-dimensional ``Load``/``Store`` into a row-major ``int64``
    element offset (``loop_ir`` contract for code generation).

    ``simplifier``: a :class:`~.simplify.Simplifier` that the caller runs over the result
    next (``finalize``); each offset is then built simplified by it, so that walk finds
    the loads and stores of an unrolled kernel as they are instead of rebuilding each
    statement a second time."""
    return PrimFunc(func.name, func.params, _Flatten(simplifier).visit(func.body), func.attrs)
