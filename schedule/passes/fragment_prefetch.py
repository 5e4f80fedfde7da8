"""Fragment prefetch: ``Stage.pipeline(k, stages, fragment_prefetch=True)``.

A software-pipelined loop (:mod:`.software_pipeline`) whose synchronous compute loads
register fragments from the shared slots in several k steps, ``L0 M0 L1 M1 ... L(n-1)
M(n-1)`` (``L`` reading the shared slots into thread-private buffers, ``M`` computing from
them, the fragment stages attached at an unrolled k step loop), runs its steady state as::

    wait_group(S - 2); sync; copies(S - 1); commit; L0(0)[F']
    for k:
      M0(k)[F']; L1(k); M1(k) ... L(n-1)(k)
      wait_group(S - 2); sync
      if k + S < E: copies(k + S)
      commit
      if k + 1 < E: L0(k + 1)[F']
      M(n-1)(k)
    wait_group(0)

The barrier of iteration ``k + 1`` moves before the MMAs of the last k step, and the
first step's fragments of the next tile are loaded right after it, into a second set of
fragment registers ``F'`` (``<name>.next``, double buffering), so that the MMAs of the
last step overlap those loads and the barrier. Why it is right: the copy issued after the
barrier of ``k + 1`` writes the slot of tile ``k``, whose loads (``L0`` in ``k - 1``, the
others in ``k``) every thread issued before that barrier; the last step's MMAs read only
registers; the wait counts are the original loop's, one iteration later.

With an even number of steps that each load the same fragment tiles (``ALTERNATE_SETS``)
the steps alternate between ``F'`` (even) and ``F`` (odd), and each step's loads move
before the MMAs of the step before: ``L1 M0[F'] L2[F'] M1 L3 M2[F'] ...``. Right because
``L(i + 1)`` writes the set ``M(i - 1)`` read (issued before it) and ``M(i)`` reads the
other, written by ``L(i)`` alone since ``M(i - 2)``; the last step ``M(n-1)`` reads ``F``,
so the next tile's ``L0`` into ``F'`` stays after the barrier as above.

Refused (``ScheduleError``, primitive ``pipeline``): a compute of another form, loads of
the first step into memory that is not thread-private, fragments accessed element by
element or inside a loop or branch, reads overlapping a tile a later step loaded only in
part, the last step reading a fragment of the first.
"""

from __future__ import annotations

from polytile.te.expr import Binary, Cmp, Const, Expr
from polytile.te.visitor import ExprMutator, collect

from ..kinds import PipelinePragma, thread_private
from ..loop_ir import (Buffer, For, IfThenElse, Load, Stmt, StmtMutator, Store, Sync,
                       TensorCall, seq, stmt_exprs, walk_stmts)
from .loops import substitute_stmt
from .pipeline_slots import Slots, add, flat_compute, refuse, sub


#: The prefetched fragment loads of tile ``k + 1`` come before the copies of tile ``k + S``
#: (True) or after them (False, the order before 2026-12-02); without fragment prefetch,
#: the same for the leading loads of the compute of tile ``k`` (``software_pipeline``). Why first: the copies write
#: shared memory (``cp.async``, a "memory" clobber), so neither nvcc nor ptxas moves the
#: ``ldmatrix`` of the prefetch above them; issued after the copies, the loads landed at
#: the very end of the loop body (SASS of ``MMA_VARIANTS[14]``: the last ``LDSM`` four
#: instructions before the ``HMMA`` that reads it, at the top of the next iteration).
#: Both orders are right: the copies write the slot of tile ``k``, the loads read the slot
#: of tile ``k + 1``, complete after the wait and the barrier.
LOADS_BEFORE_COPIES = True

# The copies stay in one burst after the barrier: spread between the k steps (CUTLASS's
# MmaMultistage order, tile k + S - 1 one iteration later) they were slower on the H200
# (MMA_BEST fp16 4096^3, one run of benchmarks/mma_candidates.py, 2026-12-02 15:35, cuBLAS
# 771.6: after the barrier 397.7 TFLOP/s; A's and B's copy loops after the first and
# second step's MMAs 383.7; one 16-byte cp.async before every fourth of the 48 MMA calls
# 335.1), and that option was removed.


#: The k steps of a tile alternate between the two fragment sets (``F'`` for even steps,
#: ``F`` for odd ones), each step's loads issued before the MMAs of the step before it:
#: ``L1 M0' L2' M1 L3 M2' ... M(n-2)'`` then the barrier, ``L0'`` of the next tile and
#: ``M(n-1)``. Why: with one set for the steps after the first, the loads of step ``i + 1``
#: reuse the registers that the MMAs of step ``i`` read, so ptxas issues them after the
#: last of those MMAs and the first MMA of step ``i + 1`` waits for an ``ldmatrix``'s
#: latency (SASS of ``MMA_BEST``: the eight ``LDSM`` of step 2 between the last ``HMMA``
#: of step 1 and the first of step 2, which reads them). The two sets are the registers
#: the prefetch already holds. Taken where every step loads the same fragment tiles
#: (whole tiles at constant offsets, tensor intrinsic calls) and there is an even number
#: of steps (the last step's set must not be the one the next tile's first loads write);
#: else the order above. False: the order above always (for experiments). H200, 4096^3,
#: one run of ``benchmarks/mma_candidates.py`` (2026-12-02 13:00, medians of 7 interleaved
#: rounds, cuBLAS 727 fp16 / 754 bf16): MMA_BEST fp16 380.6 (off: 383.6), bf16 398.2
#: (390.2) TFLOP/s; 128x128x64 blocks of 4 warps in 3 stages fp16 396.0 (373.1).
ALTERNATE_SETS = True


def _reads(s: Stmt, bufs) -> set:
    """Ids of the buffers of ``bufs`` (a set of ids) that ``s`` reads."""
    out = set()
    for x in walk_stmts(s):
        if isinstance(x, TensorCall) and x.part != "reset":
            out |= {id(b) for b in x.buffers[:-1]} & bufs
        out |= {id(ld.buffer) for e in stmt_exprs(x) for ld in collect(e, Load)} & bufs
    return out


class _RenameLoads(ExprMutator):
    def __init__(self, new: dict):
        self.new = new

    def visit_Load(self, x: Load):
        x = self.generic_visit(x)
        b = self.new.get(id(x.buffer))
        return x if b is None else Load(x.dtype, b, x.indices)


class _Rename(StmtMutator):
    """Every access of the buffers of ``new`` (old buffer id -> new buffer) renamed."""

    def __init__(self, new: dict):
        self.new = new
        self.loads = _RenameLoads(new)

    def visit_expr(self, e):
        return self.loads.visit(e)

    def visit_Store(self, s: Store):
        s = self.generic_visit(s)
        b = self.new.get(id(s.buffer))
        return s if b is None else Store(b, s.indices, s.value)

    def visit_TensorCall(self, s: TensorCall):
        s = self.generic_visit(s)
        if not any(id(b) in self.new for b in s.buffers):
            return s
        bufs = tuple(self.new.get(id(b), b) for b in s.buffers)
        return TensorCall(s.intrin, s.part, bufs, s.shapes, s.strides, s.indices, s.body)


def _split_steps(p: PipelinePragma, var, compute: list, bufs: dict):
    """``compute`` as ``(head, mid, tail)``: the loads of the first k step (reading the
    copied buffers), the statements up to the last load, the rest (the last step's
    MMAs), with the fragments ``head`` writes renamed ``<name>.next`` in ``head`` and
    in what reads them before they are loaded again."""
    g, flat = flat_compute(compute, var)
    if g is not None:
        parts = _split_steps(p, var, [g.then_case], bufs)
        return tuple([IfThenElse(g.cond, seq(*x))] for x in parts)
    ids = set(bufs)
    loads = [bool(_reads(c, ids)) for c in flat]
    n = next((i for i, x in enumerate(loads) if not x), len(flat))
    last = max((i for i, x in enumerate(loads) if x), default=-1)
    if n == 0 or last < n or last == len(flat) - 1:
        refuse(p, "fragment_prefetch: its compute is not loads from the shared "
               "buffers in two k steps or more, each followed by the compute of the "
               "step", "L0 M0 L1 M1 ...: fragments loaded per k step (their stages "
               "computed at the unrolled k step loop)",
               hint="attach the fragment stages at the k step loop inside the "
               "pipelined one and unroll it, or drop fragment_prefetch")
    head, mid, tail = flat[:n], flat[n:last + 1], flat[last + 1:]
    frags: dict = {}
    for x in walk_stmts(seq(*head)):
        out = x.buffer if isinstance(x, Store) else (
            x.buffers[-1] if isinstance(x, TensorCall) else None)
        if out is None:
            continue
        if not thread_private(out.scope):
            refuse(p, f"fragment_prefetch: the loads of the first k step write "
                   f"{out.name!r} ({out.scope})", "loads into fragments or local "
                   "registers only")
        frags[id(out)] = out
    nxt = {k: Buffer(b.name + ".next", b.shape, b.dtype, b.scope, b.swizzle)
           for k, b in frags.items()}
    head = [_Rename(nxt).visit(c) for c in head]
    # which value each read of a fragment sees, region by region: the first step's
    # (head) until a later load writes the same tile; a read overlapping such a tile
    # only partly, or an element access, is refused
    rewritten: dict = {k: [] for k in frags}

    def fresh(r, rs) -> bool | None:
        """Is region ``r`` one of ``rs`` (True), apart from all (False), else None?"""
        if r in rs:
            return True
        (o, sh) = r
        for (o2, sh2) in rs:
            if all(a < a2 + s2 and a2 < a + s for a, s, a2, s2 in zip(o, sh, o2, sh2)):
                return None
        return False

    def visit(c: Stmt, where: str) -> Stmt:
        for x in walk_stmts(c):
            if isinstance(x, Store) and id(x.buffer) in frags or any(
                    id(ld.buffer) in frags for e in stmt_exprs(x)
                    for ld in collect(e, Load)):
                refuse(p, "fragment_prefetch: a fragment of the first k step is "
                       "accessed element by element", "fragments used by tensor "
                       "intrinsics only")
        if not isinstance(c, TensorCall):
            if any(isinstance(x, TensorCall) and any(id(b) in frags for b in x.buffers)
                   for x in walk_stmts(c)):
                refuse(p, "fragment_prefetch: a fragment of the first k step is "
                       "used inside a loop or branch", "an unrolled k step loop")
            return c
        bufs = list(c.buffers)
        for i, b in enumerate(c.buffers[:-1] if c.part != "reset" else ()):
            if id(b) not in frags:
                continue
            r = _region(c, i)
            f = None if r is None else fresh(r, rewritten[id(b)])
            if f is None:
                refuse(p, f"fragment_prefetch: a read of fragment {b.name!r} "
                       "overlaps a tile a later k step loaded only in part",
                       "whole fragment tiles at constant offsets")
            if not f:
                if where == "tail":
                    refuse(p, f"fragment_prefetch: the last k step reads fragment "
                           f"{b.name!r} of the first one", "each k step loading "
                           "the fragments it computes from")
                bufs[i] = nxt[id(b)]
        out = c.buffers[-1]
        if id(out) in frags:
            r = _region(c, len(c.buffers) - 1)
            if r is None:
                refuse(p, f"fragment_prefetch: fragment {out.name!r} is loaded at a "
                       "non-constant offset", "whole fragment tiles at constant "
                       "offsets (unrolled loops)")
            rewritten[id(out)].append(r)
        if bufs == list(c.buffers):
            return c
        return TensorCall(c.intrin, c.part, tuple(bufs), c.shapes, c.strides, c.indices,
                          c.body)

    alt = _alternate(mid, tail, head, ids, frags, nxt) if ALTERNATE_SETS else None
    if alt is not None:
        return head, alt, tail
    renamed = [visit(c, "mid") for c in mid]
    tail = [visit(c, "tail") for c in tail]
    return head, renamed, tail


def _region(call: TensorCall, i: int):
    """Operand ``i`` of ``call`` as ``(start indices, shape)``, None where an index is not
    a constant."""
    ix = call.operand_indices()[i]
    if not all(isinstance(v, Const) for v in ix):
        return None
    return tuple(v.value for v in ix), tuple(call.shapes[i])


def _fragment_use(stmts: list, frags: dict, loads: bool) -> set | None:
    """The ``(buffer id, region)`` of ``frags`` that ``stmts`` write (``loads``) or read
    (the compute of a step), each access a tensor call at the top of ``stmts`` naming a
    whole region at constant offsets; None where any access is something else (an element,
    a call inside a loop or branch, a region not constant, a compute writing a fragment,
    a load reading one)."""
    out = set()
    for c in stmts:
        for x in walk_stmts(c):
            if isinstance(x, Store) and id(x.buffer) in frags or any(
                    id(ld.buffer) in frags for e in stmt_exprs(x)
                    for ld in collect(e, Load)):
                return None
            if not isinstance(x, TensorCall):
                continue
            ins = x.buffers[:-1] if x.part != "reset" else ()
            touched = [i for i, b in enumerate(ins) if id(b) in frags]
            wrote = id(x.buffers[-1]) in frags
            if not touched and not wrote:
                continue
            if x is not c or (touched if loads else wrote):
                return None
            for i in ([len(x.buffers) - 1] if loads else touched):
                r = _region(x, i)
                if r is None:
                    return None
                out.add((id(x.buffers[i]), r))
    return out


def _accessed(stmts: list) -> tuple[set, set]:
    """Ids of the buffers ``stmts`` read and write."""
    reads, writes = set(), set()
    for c in stmts:
        for x in walk_stmts(c):
            if isinstance(x, Store):
                writes.add(id(x.buffer))
            elif isinstance(x, TensorCall):
                writes.add(id(x.buffers[-1]))
                if x.part != "reset":
                    reads |= {id(b) for b in x.buffers[:-1]}
            reads |= {id(ld.buffer) for e in stmt_exprs(x) for ld in collect(e, Load)}
    return reads, writes


def _alternate(mid: list, tail: list, head: list, ids: set, frags: dict,
               nxt: dict) -> list | None:
    """``mid`` (``M0 L1 M1 ... L(n-1)``) as ``L1 M0' L2' M1 ... L(n-1) M(n-2)'``: the
    loads of step ``i + 1`` before the MMAs of step ``i``, even steps in the ``.next``
    fragments (``nxt``) and odd ones in the others (``ALTERNATE_SETS``); ``head`` (the
    loads of step 0, already renamed) and ``tail`` (``M(n-1)``, odd) as they are. None
    where that is not provably the same computation: a step that does not load exactly the
    fragment tiles of step 0, a compute reading a tile its step did not load, an odd
    number of steps, or a moved load touching what the compute it passes touches."""
    groups: list = []
    for c in mid:
        is_load = bool(_reads(c, ids))
        if groups and groups[-1][0] == is_load:
            groups[-1][1].append(c)
        else:
            groups.append((is_load, [c]))
    if not groups or groups[0][0] or not groups[-1][0]:
        return None
    computes = [g for is_load, g in groups if not is_load] + [tail]
    loads = [None] + [g for is_load, g in groups if is_load]
    if len(computes) % 2:
        return None
    inv = {id(b): k for k, b in nxt.items()}
    tiles = _fragment_use(head, {id(b): b for b in nxt.values()}, True)
    if not tiles:
        return None
    tiles = {(inv[b], r) for b, r in tiles}
    for i, (ld, comp) in enumerate(zip(loads, computes)):
        if ld is not None and _fragment_use(ld, frags, True) != tiles:
            return None
        used = _fragment_use(comp, frags, False)
        if used is None or not used <= tiles:
            return None
    rename = _Rename(nxt)
    out = []
    for i in range(len(computes) - 1):
        ld, comp = loads[i + 1], computes[i]
        if i % 2 == 0:
            comp = [rename.visit(c) for c in comp]
        else:
            ld = [rename.visit(c) for c in ld]
        lr, lw = _accessed(ld)
        cr, cw = _accessed(comp)
        if lw & (cr | cw) or cw & lr:
            return None
        out += ld + comp
    return out


def prefetch_fragments(s: For, p: PipelinePragma, compute: list, bufs: dict, new: dict,
                       stage, ahead: int, prologue: list, commit, wait,
                       unroll: bool = True) -> Stmt:
    """The steady state of ``fragment_prefetch`` (``Stage.pipeline``): iteration
    ``k`` runs the MMAs of its first steps, the barrier of iteration ``k + 1``, the
    first fragment loads of ``k + 1`` (into the ``.next`` fragments) and the MMAs of
    its last step. Why it is right: the copy issued after the barrier of ``k + 1``
    writes the slot of tile ``k``, whose loads (``head`` in ``k - 1``, ``mid`` in
    ``k``) every thread issued before that barrier; the last step's MMAs read only
    registers; the wait counts are the original loop's, one iteration later."""
    head, mid, tail = _split_steps(p, s.var, compute, bufs)
    k, lo, ext = s.var, s.min, s.extent
    n = p.stages

    def at(stmts: list, it: Expr, rel: Expr) -> Stmt:
        slot = Binary("int64", "truncmod", rel, Const("int64", n))
        return Slots(new, slot).visit(substitute_stmt(seq(*stmts), {k: it}))

    def fetch(rel: Expr) -> Stmt:
        nxt = add(rel, ahead)
        return IfThenElse(Cmp("bool", "lt", nxt, ext), stage(add(lo, nxt), nxt))

    def steady(it: Expr, rel: Expr, slot_of) -> Stmt:
        """Iteration ``it`` with the tile ``rel + c`` in slot ``slot_of(c)``."""
        def at_(stmts: list, it_: Expr, c: int) -> Stmt:
            return Slots(new, slot_of(c)).visit(substitute_stmt(seq(*stmts), {k: it_}))
        rel1 = add(rel, 1)
        nxt = add(rel1, ahead)
        fetch_ = IfThenElse(Cmp("bool", "lt", nxt, ext),
                            stage(add(lo, nxt), nxt, slot_of(1 + ahead)))
        loads_ = IfThenElse(Cmp("bool", "lt", rel1, ext), at_(head, add(it, 1), 1))
        if LOADS_BEFORE_COPIES:
            return seq(at_(mid, it, 0), wait(ahead - 1), Sync("shared"), loads_, fetch_,
                       commit, at_(tail, it, 0))
        return seq(at_(mid, it, 0), wait(ahead - 1), Sync("shared"), fetch_, commit,
                   loads_, at_(tail, it, 0))

    zero = Const("int64", 0)
    first = at(head, lo, zero)
    if not (isinstance(ext, Const) and ext.value > 0):
        first = IfThenElse(Cmp("bool", "lt", zero, ext), first)
    rel = sub(k, lo)
    rel1 = add(rel, 1)
    loads = IfThenElse(Cmp("bool", "lt", rel1, ext), at(head, add(k, 1), rel1))
    if LOADS_BEFORE_COPIES:
        body = seq(at(mid, k, rel), wait(ahead - 1), Sync("shared"), loads, fetch(rel1),
                   commit, at(tail, k, rel))
    else:
        body = seq(at(mid, k, rel), wait(ahead - 1), Sync("shared"), fetch(rel1), commit,
                   loads, at(tail, k, rel))
    pragmas = tuple(x for x in s.pragmas if not isinstance(x, PipelinePragma))
    from .software_pipeline import unroll_slots   # (it imports this module)

    loop = unroll_slots(s, n, steady, unroll)
    if loop is None:
        loop = For(k, lo, ext, s.kind, body, s.step, pragmas)
    return seq(Sync("shared"), *prologue, wait(ahead - 1), Sync("shared"), fetch(zero),
               commit, first, loop, wait(0))
