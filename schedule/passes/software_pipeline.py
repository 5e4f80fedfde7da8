"""Software pipelining of shared-memory staging loops (``Stage.pipeline``).

A loop whose ``For.pragmas`` hold a :class:`~..kinds.PipelinePragma` with ``stages = S``
has the body ``[sync] P(k); sync; C(k)``: ``P`` copies global memory into shared buffers
``B`` (vectorized 16-byte loops), ``C`` computes from them. It becomes::

    sync
    P(lo + j) into slot j; commit_group              for j in 0 .. S-2 (if j < E)
    for k in range(lo, lo + E):
      wait_group(S - 2); sync                        # tile k has landed, in every thread
      if k - lo + S - 1 < E: P(k + S - 1) into slot (k - lo + S - 1) % S
      commit_group                                   # empty groups keep the count exact
      C(k) from slot (k - lo) % S
    wait_group(0)

Two normalisations come first: a guard of the whole body that does not depend on ``k``
(``for k: if c: ...``, the partial tile rows of grouped blocks) moves outside the loop,
and shared copies that a stage attached at the same loop separates (``copy A; sync;
fragments of A; sync; copy B``) are gathered before the barrier (``_gather_copies``).

With ``mma_wait = N`` (``Stage.pipeline``; a compute of asynchronous intrinsic calls,
``te.AsyncGroup``) the copies run ``D = S - 1 - N`` iterations ahead instead of ``S - 1``
(``wait_group(D - 1)``), a proxy fence precedes the barrier, and the compute is one group
of calls (``begin``, calls, ``commit``) followed by ``wait(N)``; after the loop ``wait(0)``.
Why: the barrier of iteration ``k`` follows every thread's ``wait(N)`` of iteration
``k - 1``, so only the groups of iterations ``k - N .. k - 1`` may still read their slots;
with tile ``k`` in use and ``k + 1 .. k + D - 1`` landing, the copy of tile ``k + D`` takes
the remaining slot, ``(k + D) % S == (k - N - 1) % S``. With ``copy_after_wait`` the
copies follow the compute's ``wait(N)`` and a second barrier (groups up to ``k - N``
retired in every thread), so ``D = S - N``: groups ``k - N + 1 .. k`` and tiles ``k + 1 ..
k + D - 1`` hold ``S - 1`` slots, tile ``k + D`` the one of group ``k - N``.

With ``fragment_prefetch`` (a synchronous compute loading register fragments per k step)
the steady state also moves the next iteration's barrier and first fragment loads before
the last step's MMAs: :mod:`.fragment_prefetch`.

With ``tma`` the copies of a tile are TMA boxes issued by one thread that complete on the
mbarrier of their slot, and ``wait_group(D - 1)`` is each thread's wait on the mbarrier of
the slot of tile ``k`` (phase parity ``(k - lo) / S % 2``); nothing is committed
(:mod:`.tma_copy`).

Each ``B`` gets a leading dimension of ``S`` slots. Why it is right: the copy issued at
iteration ``k`` writes the slot ``C(k - 1)`` read, and every thread has finished
``C(k - 1)`` when it passes the barrier of iteration ``k``; ``C(k)`` reads the slot written
by the copy of iteration ``k - S + 1`` (or the prologue), which ``wait_group(S - 2)``
completed in the issuing thread (``S - 1 + k`` groups committed, at most ``S - 2`` pending)
before that barrier made it visible to all. The reference interpreter runs the
asynchronous copies literally (:mod:`.async_copy`), so the claim is tested, not assumed.
Model: the multistage main loops of CUTLASS (``MmaMultistage``) and Triton's pipeliner.
"""

from __future__ import annotations

from polytile.errors import fail
from polytile.te.expr import Binary, Cast, Cmp, Const, Expr, Var
from polytile.te.visitor import collect, structural_equal

from ..kinds import LoopKind, PipelinePragma, thread_private
from ..loop_ir import (Allocate, Buffer, Evaluate, ExternCall, For, IfThenElse, Load, Seq, Stmt,
                       StmtMutator, Store, Sync, TensorCall, child_stmts, seq, stmt_exprs,
                       walk_stmts)
from .async_copy import async_copy_refusal, commit_group, is_async_copy, mark_async, wait_group
from . import fragment_prefetch
from .fragment_prefetch import prefetch_fragments
from .loops import substitute_stmt
from .pipeline_slots import Slots, add, flat_compute, invariant, refuse, sub
from .tma_copy import mbarrier_buffer, tma_boxes, tma_init, tma_load, tma_wait


def _pragma(s: For) -> PipelinePragma | None:
    return next((p for p in s.pragmas if isinstance(p, PipelinePragma)), None)


def is_async_call(x) -> bool:
    """Is ``x`` a call that only issues its work (the ``update`` of an intrinsic with a
    ``te.AsyncGroup``)?"""
    return (isinstance(x, TensorCall) and x.part == "update"
            and getattr(x.intrin, "async_group", None) is not None)


def group_call(name: str, *args: int) -> Stmt:
    """``name(args)``: one step of an intrinsic's ``te.AsyncGroup`` protocol."""
    return Evaluate(ExternCall("void", name, tuple(Const("int32", a) for a in args), "intrin"))


def mma_wait_group(group, n: int) -> Stmt:
    """``group.wait(n)``: at most ``n`` groups of asynchronous calls still in flight."""
    return group_call(group.wait, n)


#: Unroll the steady state of a pipeline of a constant trip count by its ``stages`` so
#: that every slot index is a constant (modulo variable expansion), instead of the
#: ``truncmod(k, S)`` of each iteration. Why: with 8 warps per SM the integer chains of the
#: slot addresses (a division by a constant, multiplies, shifts: ~25 instructions per
#: iteration of ``MMA_VARIANTS[14]``) sit between the barrier and the ``ldmatrix`` of the
#: next fragments, and ncu sampled a third of the stalls as fixed-latency dependencies.
#: SASS of ``MMA_VARIANTS[14]`` (nvcc 13, sm_90): 111 instructions per k tile instead of
#: 153, 232 registers, no spills. Yet slower on the H200 (4096^3 float16, one run of
#: 2026-12-02, cuBLAS 754): [14] 388.7 -> 366.4, [18] 403.5 -> 365.4 TFLOP/s, hence off: a
#: switch for experiments (the loads of the copies and fragments stay right).
UNROLL_SLOTS = False


def unroll_slots(s: For, n: int, steady, enabled: bool = True) -> Stmt | None:
    """The steady state of loop ``s`` (``for k in [lo, lo + E)``, ``E`` a constant) with
    its slots constant: ``for k.slots in [0, E // n): steady(k0 + j, ...)`` for ``j`` in
    ``0 .. n - 1`` (``k0 = lo + n * k.slots``), then the ``E % n`` last iterations, where
    ``steady(it, rel, slot_of)`` builds iteration ``it`` (``rel = it - lo``) whose tile
    ``rel + c`` lives in slot ``slot_of(c)``. None when ``UNROLL_SLOTS`` is off (or not
    ``enabled``), the trip count is not a constant or below ``n``, or ``n`` is 1."""
    ext = s.extent
    if not (UNROLL_SLOTS and enabled) or n < 2 or not isinstance(ext, Const) or ext.value < n:
        return None
    reps, rem = divmod(ext.value, n)
    ko = Var(s.var.dtype, f"{s.var.name}.slots")

    def slots(j: int):
        return lambda c: Const("int64", (j + c) % n)

    base = Binary("int64", "mul", _i64(ko), Const("int64", n))
    body = seq(*[steady(add(add(_i64(s.min), base), j), add(base, j), slots(j))
                 for j in range(n)])
    pragmas = tuple(x for x in s.pragmas if not isinstance(x, PipelinePragma))
    out = [For(ko, Const(ko.dtype, 0), Const(ko.dtype, reps), s.kind, body, 1, pragmas)]
    for j in range(rem):
        r = reps * n + j
        out.append(steady(add(_i64(s.min), r), Const("int64", r), slots(j)))
    return seq(*out)


def _i64(e: Expr) -> Expr:
    return e if e.dtype == "int64" else Cast("int64", e)


def _leading_loads(compute: list, bufs: dict, var) -> tuple[list, list]:
    """``compute`` as ``(head, rest)``: ``head`` the leading statements that only load the
    copied ``bufs`` into thread-private buffers (the fragments of the first k step, or of
    the whole tile), ``rest`` the others; ``([], compute)`` when there is no such head or
    nothing after it. Why: the steady state issues ``head`` right after the barrier,
    before the copies of tile ``k + S - 1``: a ``cp.async`` writes shared memory, so
    neither nvcc nor ptxas moves the loads (``ldmatrix``) of the compute above it, and
    after the copies their latency was exposed to the first MMAs. Right either way: the
    copies write the slot of tile ``k - 1``, ``head`` reads the slot of tile ``k``. A
    guard of the whole compute that loop ``var`` does not change (the warps past a
    partial tile) guards each part."""
    g, flat = flat_compute(compute, var)
    if g is not None:
        head, rest = _leading_loads([g.then_case], bufs, var)
        if not head:
            return [], compute
        return [IfThenElse(g.cond, seq(*head))], [IfThenElse(g.cond, seq(*rest))]
    ids = set(bufs)
    n = 0
    for c in flat:
        writes = [x.buffer if isinstance(x, Store) else x.buffers[-1]
                  for x in walk_stmts(c) if isinstance(x, (Store, TensorCall))]
        reads = {id(ld.buffer) for ld in _loads(c)} | {
            id(b) for x in walk_stmts(c) if isinstance(x, TensorCall) and x.part != "reset"
            for b in x.buffers[:-1]}
        if not (reads & ids) or not writes or any(
                not thread_private(b.scope) or id(b) in reads for b in writes):
            break     # not a pure load of the copied buffers (an MMA, an accumulation)
        n += 1
    if n == 0 or n == len(flat):
        return [], compute
    return flat[:n], flat[n:]


def _loads(s: Stmt) -> list:
    return [x for st in walk_stmts(s) for e in stmt_exprs(st) for x in collect(e, Load)]


def _written(s: Stmt) -> set:
    out = set()
    for x in walk_stmts(s):
        if isinstance(x, Store):
            out.add(id(x.buffer))
        elif isinstance(x, TensorCall):
            out.add(id(x.buffers[-1]))
    return out


def _use_counts(s: Stmt, bufs, skip: Stmt | None = None) -> tuple[dict, int]:
    """``(id(buffer) -> uses, k)``: the uses of each of ``bufs`` in ``s`` (stores into it,
    operands of tensor calls, distinct loads of it in each expression), in one walk of
    ``s`` that does not enter the ``k`` occurrences of the statement ``skip``."""
    n = {id(b): 0 for b in bufs}
    skipped = 0
    stack = [s]
    while stack:
        x = stack.pop()
        if x is skip:
            skipped += 1
            continue
        stack.extend(child_stmts(x))
        if isinstance(x, Store) and id(x.buffer) in n:
            n[id(x.buffer)] += 1
        if isinstance(x, TensorCall):
            # a reset part only writes its output (the reduction's identity): the regions
            # of its inputs are named, not read
            for b in (x.buffers[-1:] if x.part == "reset" else x.buffers):
                if id(b) in n:
                    n[id(b)] += 1
        for e in stmt_exprs(x):
            for ld in collect(e, Load):
                if id(ld.buffer) in n:
                    n[id(ld.buffer)] += 1
    return n, skipped


def _used_outside(root: Stmt, s: Stmt, bufs) -> Buffer | None:
    """The first of ``bufs`` that ``root`` uses outside its sub-statement ``s``, if any."""
    outside, k = _use_counts(root, bufs, skip=s)
    if k != 1:   # s is not in root as one statement (rebuilt, or shared): count both
        outside, here = _use_counts(root, bufs)[0], _use_counts(s, bufs)[0]
        outside = {b: outside[b] - here[b] for b in outside}
    return next((b for b in bufs if outside[id(b)]), None)


def _is_copy(s: Stmt, body_writes: set) -> bool:
    """``s`` only copies memory the loop does not write into shared buffers."""
    if isinstance(s, Sync):
        return False
    xs = list(walk_stmts(s))
    if any(isinstance(x, (TensorCall, Sync)) for x in xs):
        return False
    stores = [x for x in xs if isinstance(x, Store)]
    return bool(stores) and all(x.buffer.scope == "shared" for x in stores) and all(
        id(ld.buffer) not in body_writes and ld.buffer.scope not in ("shared", "local")
        for ld in _loads(s))


def _touches(s: Stmt, bufs: set) -> bool:
    return any(_use_counts(s, bufs)[0].values())


def _gather_copies(stmts: list, body_writes: set) -> list:
    """Move later barrier-delimited shared copies up to the first ones, so that the body
    reads ``[sync] <copies>, sync, <compute>`` (what the rewrite pipelines).

    A stage attached at the pipelined loop between two shared copies (the fragments of
    ``A``, loaded for a whole k tile, between the copies of ``A`` and of ``B``) leaves the
    body as ``sync, copy A, sync, X, sync, copy B, sync, Y``. ``copy B`` commutes with
    ``X`` when ``X`` neither reads nor writes ``B``'s shared buffers and writes no shared
    memory (so the barriers around ``copy B`` ordered nothing else); the barrier left after
    the gathered copies orders them before ``X`` and ``Y``, and the one that starts the
    body orders them after the previous iteration's reads. Anything else is left as it is
    (the rewrite then pipelines the first copies only, or refuses)."""
    i = 0
    while i < len(stmts) and isinstance(stmts[i], Sync):
        i += 1
    j = i
    while j < len(stmts) and _is_copy(stmts[j], body_writes):
        j += 1
    if j == i or j == len(stmts) or not isinstance(stmts[j], Sync):
        return stmts
    head, rest = stmts[:j], stmts[j:]
    moved = True
    while moved:
        moved = False
        # rest = Sync, X..., Sync, copies..., Sync, ...
        for a in range(1, len(rest)):
            if not isinstance(rest[a], Sync):
                continue
            b = a + 1
            while b < len(rest) and _is_copy(rest[b], body_writes):
                b += 1
            if b == a + 1 or b == len(rest) or not isinstance(rest[b], Sync):
                continue
            group, middle = rest[a + 1:b], rest[1:a]
            written = {x.buffer for g in group for x in walk_stmts(g)
                       if isinstance(x, Store)}
            if any(_touches(m, written) for m in middle) or any(
                    isinstance(x, Store) and x.buffer.scope == "shared"
                    or isinstance(x, TensorCall) and x.buffers[-1].scope == "shared"
                    for m in middle for x in walk_stmts(m)):
                break
            head += group
            # the group and its barriers go; the one after it stays where what follows
            # writes shared memory (which the reads in X must precede)
            later = rest[b + 1:]
            keep = any(isinstance(x, Store) and x.buffer.scope == "shared"
                       or isinstance(x, TensorCall) and x.buffers[-1].scope == "shared"
                       for m in later for x in walk_stmts(m))
            rest = rest[:a] + rest[b if keep else b + 1:]
            moved = True
            break
    return head + rest


def _one_guard(body: Stmt, var) -> Stmt:
    """``if c: X; if c: Y`` (no else, ``c`` the same and invariant in ``var``) as
    ``if c: X; Y``: code generation guards each statement of a loop body with the
    conditions of partial tiles separately (the partial groups of tile rows of grouped
    blocks: the copies, then the compute), and the whole-body guard is what
    :meth:`_Pipeline.rewrite` lifts out of the loop."""
    if not isinstance(body, Seq) or len(body.stmts) < 2:
        return body
    first = body.stmts[0]
    if not all(isinstance(x, IfThenElse) and x.else_case is None for x in body.stmts):
        return body
    if not invariant(first.cond, var) or not all(
            structural_equal(x.cond, first.cond) for x in body.stmts[1:]):
        return body
    flat = []
    for x in body.stmts:
        flat.extend(x.then_case.stmts if isinstance(x.then_case, Seq) else (x.then_case,))
    return IfThenElse(first.cond, Seq(tuple(flat)))


class _Pipeline(StmtMutator):
    def __init__(self, root: Stmt, asynchronous: bool, leading_loads: bool = True):
        self.root = root
        self.asynchronous = asynchronous
        self.leading_loads = leading_loads
        #: old buffer id -> its slotted replacement, over every rewritten loop
        self.replaced: dict = {}

    def visit_For(self, s: For):
        s = self.generic_visit(s)
        p = _pragma(s)
        return s if p is None else self.rewrite(s, p)

    def rewrite(self, s: For, p: PipelinePragma) -> Stmt:
        body = _one_guard(s.body, s.var)
        if isinstance(body, IfThenElse) and body.else_case is None and \
                invariant(body.cond, s.var):
            # a guard of the whole body that does not change with the loop (the partial
            # tile rows of grouped blocks): `for k: if c: B` is `if c: for k: B`
            inner = For(s.var, s.min, s.extent, s.kind, body.then_case, s.step, s.pragmas)
            return IfThenElse(body.cond, self.rewrite(inner, p))
        stmts = _gather_copies(list(body.stmts) if isinstance(body, Seq) else [body],
                               _written(body))
        i = 0
        while i < len(stmts) and isinstance(stmts[i], Sync):
            i += 1
        copies = []
        while i < len(stmts) and not isinstance(stmts[i], Sync):
            copies.append(stmts[i])
            i += 1
        compute = stmts[i + 1:]
        if not copies or i == len(stmts) or not compute:
            # without any barrier the loop is not a GPU kernel's loop over shared tiles (a
            # CPU loop, or a GPU loop with local stages only): there is no copy to overlap
            bare = not any(isinstance(x, Sync) for x in stmts)
            refuse(p, "its body is not <copies into shared memory>, barrier, <compute>"
                   + (" (it has no barrier: no stage is copied into shared memory there)"
                      if bare else ""),
                   "a loop that shared stages are computed at (compute_at) and "
                   "read after", Loop_body=str(s.body).strip().splitlines()[0][:200],
                   hint="pipeline the loop the cache_read stages are attached at"
                   + ("; pipeline and double_buffer overlap the shared-memory copies of GPU "
                      "kernels, on a CPU target leave them out" if bare else ""))
        bufs: dict = {}
        for c in copies:
            for x in walk_stmts(c):
                if isinstance(x, TensorCall) or (isinstance(x, Store)
                                                 and x.buffer.scope != "shared"):
                    name = x.buffers[-1].name if isinstance(x, TensorCall) else x.buffer.name
                    refuse(p, f"the statements before its barrier write {name!r}, "
                           "which is not a shared copy", "only shared copies there")
                if isinstance(x, Store):
                    bufs[id(x.buffer)] = x.buffer
                if isinstance(x, For) and x.kind == LoopKind.VECTORIZED and \
                        self.asynchronous and not p.tma:
                    why = async_copy_refusal(x)
                    if why is not None and not p.sync_copies:
                        st = next(y for y in walk_stmts(x) if isinstance(y, Store))
                        refuse(p, f"the copy into {st.buffer.name!r} (stage "
                               f"{st.buffer.name!r}, loop {x.var.name!r}) cannot be a "
                               f"16-byte cp.async: {why}", "16-byte vector copies with "
                               "aligned addresses", hint="vectorize the copy into 8 "
                               "float16 (4 float32) lanes; row lengths and storage_align "
                               "padding multiples of the vector")
        for c in copies if self.asynchronous and not p.tma and not p.sync_copies else ():
            bare = [x for x in walk_stmts(c) if isinstance(x, Store)
                    and not any(is_async_copy(f) and any(y is x for y in walk_stmts(f))
                                for f in walk_stmts(c) if isinstance(f, For)
                                and f.kind == LoopKind.VECTORIZED)]
            if bare:
                refuse(p, f"the copy into {bare[0].buffer.name!r} (stage "
                       f"{bare[0].buffer.name!r}) is not a vectorized loop",
                       "copies that are 16-byte cp.async vector loops",
                       hint=f"s[{bare[0].buffer.name}].vectorize(<innermost copy axis>) "
                       "with 8 float16 (4 float32) lanes")
        body_writes = _written(s.body)
        for c in copies:
            for ld in _loads(c):
                if id(ld.buffer) in body_writes or ld.buffer.scope in ("shared", "local"):
                    refuse(p, f"a copy reads {ld.buffer.name!r}, which the loop writes "
                           "or which is not global memory", "copies of global inputs")
        for c in compute:
            w = _written(c) & set(bufs)
            if w:
                refuse(p, f"its compute writes the copied buffer "
                       f"{bufs[next(iter(w))].name!r}", "a compute that only reads it")
            if any(isinstance(x, For) and _pragma(x) for x in walk_stmts(c)):
                refuse(p, "a loop inside it is pipelined too", "one pipelined loop "
                       "per nest")
        b = _used_outside(self.root, s, list(bufs.values()))
        if b is not None:
            refuse(p, f"shared buffer {b.name!r} is used outside the loop",
                   "buffers that only the loop uses")
        if s.step != 1:
            refuse(p, f"its step is {s.step}", "a unit step")
        asyncs = [x for c in compute for x in walk_stmts(c) if is_async_call(x)]
        groups = {x.intrin.async_group for x in asyncs}
        if p.mma_wait is None and asyncs:
            refuse(p, f"its compute issues asynchronous calls of intrinsic "
                   f"{asyncs[0].intrin.name!r}", "mma_wait=N: the groups of them left "
                   "in flight per iteration", hint=f"s[{p.stage}].pipeline("
                   f"{p.axis}, stages={p.stages}, mma_wait=1)")
        if p.mma_wait is not None and not asyncs:
            refuse(p, f"mma_wait={p.mma_wait} but its compute has no asynchronous "
                   "intrinsic call", "a compute tensorized with an asynchronous "
                   "intrinsic (te.AsyncGroup)", hint="drop mma_wait")
        if len(groups) > 1:
            refuse(p, "its compute mixes asynchronous intrinsics of different "
                   "protocols", "one te.AsyncGroup per pipelined loop")
        group = next(iter(groups)) if groups else None
        n = p.stages
        # copy_after_wait: the slot of group k - N is free once this iteration's wait(N)
        # and a second barrier have retired it in every thread: one tile further ahead
        ahead = n - (p.mma_wait or 0) - (0 if p.copy_after_wait else 1)
        new = {k: Buffer(b.name, (n,) + tuple(b.shape), b.dtype, b.scope, b.swizzle)
               for k, b in bufs.items()}
        self.replaced.update(new)
        k, lo, ext = s.var, s.min, s.extent
        # tma: one bulk copy per tile, completing on the mbarrier of its slot
        boxes = tma_boxes(copies, p) if p.tma else None
        bar = mbarrier_buffer(f"{p.stage}.{p.axis}", n) if p.tma else None

        def stage(at: Expr, rel: Expr, slot: Expr | None = None) -> Stmt:
            if slot is None:
                slot = Binary("int64", "truncmod", rel, Const("int64", n))
            if boxes is not None:
                return seq(*[tma_load(b, new[id(b.dst)], slot, bar, {k: at})
                             for b in boxes])
            body = substitute_stmt(seq(*copies), {k: at})
            return Slots(new, slot).visit(body)

        # without asynchronous copies the same slots are right (the copies complete at
        # once), and there is nothing to commit or wait for
        commit = commit_group() if self.asynchronous and boxes is None else None
        prologue = []
        for j in range(ahead):
            load = stage(add(lo, j), Const("int64", j))
            if not (isinstance(ext, Const) and j < ext.value):
                load = IfThenElse(Cmp("bool", "lt", Const("int64", j), ext), load)
            prologue += [load, commit]
        rel = sub(k, lo)
        nxt = add(rel, ahead)
        fetch = IfThenElse(Cmp("bool", "lt", nxt, ext), stage(add(k, ahead), nxt))
        slot = Binary("int64", "truncmod", rel, Const("int64", n))
        wait = wait_group if self.asynchronous and boxes is None else (lambda _: None)

        def tile_wait(rel: Expr, slot: Expr) -> Stmt | None:
            """Wait for tile ``rel`` (from the first) in slot ``slot``: its copies'
            group (cp.async), or the phase of its slot's mbarrier (tma: the slot's
            ``rel // n``-th fill, parity ``rel // n % 2``)."""
            if boxes is None:
                return wait(ahead - 1)
            fill = Binary("int64", "truncdiv", rel, Const("int64", n))
            return tma_wait(bar, slot, Binary("int64", "truncmod", fill, Const("int64", 2)))

        def finish(*stmts) -> Stmt:
            if boxes is None:
                return seq(Sync("shared"), *stmts)
            # a barrier before the init: a loop entered again (inside another loop) must
            # not re-initialise mbarriers some thread still waits on
            return Allocate(bar, seq(Sync("shared"), tma_init(bar, n, len(boxes)),
                                     Sync("shared"), *stmts))
        work = Slots(new, slot).visit(seq(*compute))
        # the asynchronous calls read the tiles through the async proxy: a proxy fence makes
        # the threads' cp.async writes (generic proxy) visible to them; TMA writes through
        # the async proxy already, completed by the mbarrier the threads waited on
        proxy_fence = group_call(group.fence) if group is not None and boxes is None else None
        if p.fragment_prefetch:
            return prefetch_fragments(s, p, compute, bufs, new, stage, ahead, prologue,
                                      commit, wait, unroll=self.leading_loads)
        if group is None:
            head, rest = _leading_loads(compute, bufs, k) if (
                self.asynchronous and self.leading_loads
                and fragment_prefetch.LOADS_BEFORE_COPIES) else ([], compute)

            def steady(it: Expr, rel: Expr, slot_of) -> Stmt:
                """The body of iteration ``it`` (``rel`` from the first), the slot of
                tile ``rel + c`` being ``slot_of(c)``."""
                nxt = add(rel, ahead)
                fetch = IfThenElse(Cmp("bool", "lt", nxt, ext),
                                   stage(add(it, ahead), nxt, slot_of(ahead)))
                here = Slots(new, slot_of(0))

                def work(stmts):
                    return here.visit(substitute_stmt(seq(*stmts), {k: it}))
                if head:
                    return seq(tile_wait(rel, slot_of(0)), Sync("shared"), work(head),
                               fetch, commit, work(rest))
                return seq(tile_wait(rel, slot_of(0)), Sync("shared"), fetch, commit,
                           work(compute))

            loop = unroll_slots(s, n, steady, self.leading_loads)
            if loop is not None:
                return finish(*prologue, loop, wait(0))
            if head:
                body = seq(tile_wait(rel, slot), Sync("shared"),
                           Slots(new, slot).visit(seq(*head)), fetch, commit,
                           Slots(new, slot).visit(seq(*rest)))
            else:
                body = seq(tile_wait(rel, slot), Sync("shared"), fetch, commit, work)
            after = wait(0)
        elif p.copy_after_wait:
            body = seq(tile_wait(rel, slot), proxy_fence, Sync("shared"),
                       group_call(group.begin), work, group_call(group.commit),
                       mma_wait_group(group, p.mma_wait), Sync("shared"), fetch, commit)
            after = seq(mma_wait_group(group, 0), wait(0))
        else:
            body = seq(tile_wait(rel, slot), proxy_fence, Sync("shared"), fetch,
                       commit, group_call(group.begin), work, group_call(group.commit),
                       mma_wait_group(group, p.mma_wait))
            after = seq(mma_wait_group(group, 0), wait(0))
        pragmas = tuple(x for x in s.pragmas if not isinstance(x, PipelinePragma))
        loop = For(k, lo, ext, s.kind, body, s.step, pragmas)
        return finish(*prologue, loop, after)

class _MarkAsync(StmtMutator):
    def visit_For(self, s: For):
        if s.kind == LoopKind.VECTORIZED and not is_async_copy(s) and \
                async_copy_refusal(s) is None:
            return mark_async(s)
        return self.generic_visit(s)


class _MarkPipelined(StmtMutator):
    """The vectorized copies before the first barrier after them in a pipelined loop's
    body become ``cp.async`` (the rewrite refuses the ones that cannot)."""

    def visit_For(self, s: For):
        s = self.generic_visit(s)
        if _pragma(s) is None:
            return s
        body = s.body
        if isinstance(body, IfThenElse) and body.else_case is None and \
                invariant(body.cond, s.var):
            inner = For(s.var, s.min, s.extent, s.kind, body.then_case, s.step, s.pragmas)
            return IfThenElse(body.cond, self.visit_For(inner))
        stmts = _gather_copies(list(body.stmts) if isinstance(body, Seq) else [body],
                               _written(body))
        i = 0
        while i < len(stmts) and isinstance(stmts[i], Sync):
            i += 1
        j = i
        while j < len(stmts) and not isinstance(stmts[j], Sync):
            stmts[j] = _MarkAsync().visit(stmts[j])
            j += 1
        return For(s.var, s.min, s.extent, s.kind, seq(*stmts), s.step, s.pragmas)


def software_pipeline(stmt: Stmt, asynchronous: bool = True,
                      leading_loads: bool = True) -> Stmt:
    """Rewrite every loop marked by ``Stage.pipeline`` into a prologue and a steady state
    whose shared copies run ``stages - 1`` iterations ahead (module docstring).
    Guarantees: the same values as the loop it replaces; with ``asynchronous`` (targets
    with ``DeviceLimits.async_copy_bytes``) each copy is a 16-byte ``cp.async``, else an
    ordinary copy and no group is committed or waited for. Raises ``ScheduleError``
    (primitive ``pipeline``) naming the stage, the loop and what does not fit."""
    # (a pipelined loop without mma_wait refuses its asynchronous calls itself)
    # one walk for the pipelined loops and the asynchronous calls (most kernels have
    # neither: each walk is a walk of every statement of an unrolled kernel)
    pipelined, calls = [], []
    for x in walk_stmts(stmt):
        if isinstance(x, For) and _pragma(x):
            pipelined.append(x)
        if is_async_call(x):
            calls.append(x)
    managed = {id(x) for f in pipelined for x in walk_stmts(f.body)} if calls else set()
    for x in calls:
        if id(x) not in managed:
            fail("tensorize", f"intrinsic {x.intrin.name!r} only issues its work "
                 "(asynchronous), and no software pipeline groups and waits for its calls",
                 "its calls inside a loop pipelined with mma_wait", hint="s[<stage>]."
                 "pipeline(<k loop>, stages=3, mma_wait=1), or the synchronous intrinsic "
                 "(also where the k loop has one iteration and is no loop)")
    if not pipelined:
        return stmt
    if asynchronous:
        stmt = _MarkPipelined().visit(stmt)
    pipe = _Pipeline(stmt, asynchronous, leading_loads)
    stmt = pipe.visit(stmt)
    # what still names a replaced buffer is a reset part outside its loop (the only use
    # there that the rewrite allows), which names its input regions without reading them:
    # point it at slot 0, so that the old buffer is not allocated too
    return Slots(pipe.replaced, Const("int64", 0)).visit(stmt) if pipe.replaced else stmt


def software_pipeline_bounded(stmt: Stmt) -> Stmt:
    """:func:`software_pipeline` for kernels under a register bound (``cuda
    -min-blocks=N``): without fragment prefetch the copies stay before the compute's
    leading loads (:func:`_leading_loads`), whose registers would otherwise live across
    the copies' address arithmetic, and no steady state is unrolled (``UNROLL_SLOTS``)
    (128x128x32, 4 warps, 4 stages at 3 blocks per SM: 88 and 184 bytes of spills at 168
    registers, none without either)."""
    return software_pipeline(stmt, leading_loads=False)


def software_pipeline_synchronous(stmt: Stmt) -> Stmt:
    """:func:`software_pipeline` for targets without asynchronous copies."""
    return software_pipeline(stmt, asynchronous=False)


__all__ = ["software_pipeline", "software_pipeline_bounded", "software_pipeline_synchronous"]
