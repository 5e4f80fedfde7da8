"""Attached stages (``compute_at`` and cache stages): prefixes, regions, domains, accesses.

A stage computed inside a loop of another runs, for each value ``p`` of its *prefix* (the
loops that enclose it), the region of its tensor its consumers read there: the image of
their accesses under the reversed prefix map (exact, halos and ragged tiles included;
isl manual, "Basic Operations"; Tiramisu's ``compute_needed_and_produced``). The region's
bounding box is its buffer; its loops iterate relative to the region's origin ``lo(p)``.
A ``shared`` buffer is relaxed over thread indices (one region per block); any other
buffer inside ``vthread`` loops gets one copy per virtual thread (``vthread_copies``).
A ``local`` buffer whose stage binds a whole axis ``q`` of its own to a thread index (a
*thread-owned* dimension, ``check_thread_owned``) keeps in each thread's copy only the
slice that thread computes and reads: its dimension ``q`` has extent 1 (a row of a
softmax kept in registers: each thread's ``O x vec`` elements, not the block's).

Strided regions are compacted: when, in tensor dimension ``q``, every element read at a
prefix lies on ``lo_q(p) + s*Z`` for a constant stride ``s > 1`` (isl's range stride
information, e.g. ``B[i + 5*j]`` for ``j < 3`` reads ``i, i+5, i+10``), the buffer keeps
one element per lattice point: tensor index ``x`` is buffer index ``(x - lo_q(p)) / s``
and the stage's axis ``q`` iterates over ``y`` with ``x = lo_q(p) + s*y``. The buffer then
holds 3 elements instead of the 11 of the hull.
"""

from __future__ import annotations

import math

import islpy as isl

from polytile.errors import InternalError, LoweringError, fail, format_error
from polytile.te import dtype as dt
from polytile.te import symbolic as sym
from polytile.te.expr import binary
from polytile.te.reduction import accumulation_dtype

from . import isl_util as iu
from .kinds import LoopKind, ThreadTag, default_scope, thread_private
from .loop_ir import Buffer
from .layout import compose_access
from .loopmap import iter_ranges, leaf_affines, padded_box
from .polymodel import PolyStmt, ReadInfo, StagePlan


def ax_space(p: StagePlan, kind: str) -> str:
    return iu.tuple_str("AX", p.own_names(kind))


def set_prefix(p: StagePlan, gpu: bool) -> None:
    if p.attach is None:
        p.prefix, p.prefix_dims = [], []
        return
    tp, pos = p.attach
    p.prefix = tp.prefix + [(tp, k) for k in range(pos + 1)]
    if gpu and not p.stage.scope:
        p.scope = default_scope(q.binding(k) for q, k in p.prefix)
    if gpu:
        check_storage_scope(p)
    # a shared buffer holds the region of a whole block: relax thread loops (TVM)
    relax = p.scope == "shared"
    # and a stage computed inside one runs where its code is, outside the loops that stage
    # relaxed (the local partial of an rfactor computed inside a cross-thread reduction's
    # shared partials, under a vthread loop: fuzz seed cuda 80008)
    n = len(tp.prefix)
    p.prefix_dims = [j for j, (q, k) in enumerate(p.prefix)
                     if (j >= n or j in tp.prefix_dims)
                     and not (relax and q.binding(k) is not None and q.binding(k).in_thread)]


def relax_like_readers(p: StagePlan, consumers: list[StagePlan]) -> None:
    """Relax attached stage ``p`` over the ``vthread`` loops of its prefix that every reader
    of it relaxed (after :func:`set_prefix` of its readers, before that of the stages
    attached inside it): a reader computed inside a cross-thread reduction's shared partial
    under a vthread loop runs once for all the virtual threads, outside that loop, so a
    local stage it reads (a ``cache_read`` computed at a loop under the vthread) must run
    there too and hold the region of all of them (fuzz seed cuda 80140). Other loops a
    reader relaxed stay: :func:`_region` refuses them."""
    if p.attach is None or p.scope == "shared":
        return
    drop = set()
    for c in consumers:
        if not _stmt_kinds_reading(c, p):
            continue
        for j in p.prefix_dims:
            q, k = p.prefix[j]
            if j < len(c.prefix) and c.prefix[j][0] is q and c.prefix[j][1] == k \
                    and j not in c.prefix_dims:
                drop.add(j)
    if drop and all(p.prefix[j][0].binding(p.prefix[j][1]) is ThreadTag.VTHREAD
                    for j in drop):
        p.prefix_dims = [j for j in p.prefix_dims if j not in drop]


def check_storage_scope(p: StagePlan) -> None:
    """A GPU stage computed at a loop needs a buffer private to what computes it: not
    ``global`` inside loops bound to hardware indices (one buffer for every block and
    thread, each overwriting the others' region), not ``local`` when its own loops are
    bound to hardware indices (each thread would fill only part of its private copy).

    Raises
    ------
    ScheduleError
        Naming the primitive that chose the scope, the stage, its attach loop and the
        bound loops.
    """
    tp, pos = p.attach
    where = f"{tp.name!r}.{tp.leaves[pos].name!r}"
    who = p.stage.scope_primitive or "compute_at"
    chosen = f"has storage scope {p.scope!r}" if p.stage.scope else \
        f"gets the default scope {p.scope!r} (TVM's, from the loops around it)"
    outer = [f"{q.leaves[k].name!r} ({q.binding(k).value})" for q, k in p.prefix
             if q.binding(k) is not None and q.binding(k).is_hardware]
    if p.scope == "global" and outer:
        fail(who, f"stage {p.name!r} {chosen} but is computed at {where}, inside loops "
             f"bound to GPU indices: {', '.join(outer)}; one global buffer would be shared "
             "by every block and thread, each overwriting the region of the others",
             "scope 'shared' (one buffer per block) or 'local' (one per thread)",
             hint=f"s[{p.name}].set_scope('shared'), or compute {p.name!r} at root")
    bound = {iv: tag for iv, tag in p.stage.annotations.items()
             if isinstance(tag, ThreadTag) and tag.is_hardware}
    p.owned = {}
    if not (thread_private(p.scope) and bound):
        return
    axes = list(p.stage.op.axis)
    bad = [iv for iv, tag in bound.items() if tag.is_block or iv not in axes]
    if bad or p.scope != "local" or len(set(bound.values())) < len(bound):
        own = [f"{iv.name!r} ({tag.value})" for iv, tag in bound.items()]
        fail(who, f"stage {p.name!r} {chosen}, one copy per thread, but binds its own "
             f"loops {', '.join(own)} to GPU indices: a thread's copy can only hold the "
             "elements that thread computes when each loop bound to a thread index is a "
             "whole (unsplit, unfused) axis of the stage, one per index, and no loop of "
             "its own is bound to a block index", "a 'shared' buffer for loops bound to "
             "threads (a cooperative fetch), unbound loops for a 'local' one, or a "
             "'local' one whose thread-bound loops are whole axes (thread-owned "
             "dimensions: each thread keeps its own slice in registers)",
             hint=f"s[{p.name}].set_scope('shared') and compute it at the block loop, or "
                  "give the stage an axis per thread index (a reshaped copy "
                  "[..., threads, elements]) and bind that axis")
    p.owned = {axes.index(iv): tag for iv, tag in bound.items()}


def check_thread_owned(p: StagePlan, consumers: list[StagePlan]) -> None:
    """A ``local`` stage whose axis ``q`` is bound to thread index ``T`` (``p.owned``):
    thread ``t`` computes the elements at ``x_q - lo_q(prefix) == s_q * t`` of the region
    (``s_q`` its compaction stride, ``p.stride``), and keeps only those in its copy (the
    buffer's dimension ``q`` has extent 1). That is exact only when every statement
    reading the stage reads, on thread ``t``, elements with ``x_q - lo_q == s_q * t``:
    checked here on the exact domains with isl (TVM infers the bound of such a buffer per
    thread without this check).

    Raises
    ------
    ScheduleError
        When a reader runs outside any loop bound to ``T``, or reads an element another
        thread computed (naming the stage, the reader, the axis and the index).
    """
    tp, pos = p.attach
    where = f"{tp.name!r}.{tp.leaves[pos].name!r}"
    axes = list(p.stage.op.axis)
    for c in consumers:
        for st in c.stmts:
            if st.kind not in _stmt_kinds_reading(c, p):
                continue
            loops = [(q.binding(k), st.sched[j]) for j, (q, k) in enumerate(c.prefix)]
            loops += [(c.binding(k), st.sched[len(c.prefix) + n])
                      for n, k in enumerate(c.stmt_loops(st.kind))]
            pre = [st.sched[j] for j in p.prefix_dims]
            pre_map = iu.PwMultiAff(f"{{ {st.tuple()} -> [{', '.join(f'({v})' for v in pre)}] }}")
            lo = p.lo.pullback_pw_multi_aff(pre_map)
            for q, tag in p.owned.items():
                vals = [v for b, v in loops if b is tag and v is not None]
                if len(vals) != 1:
                    fail("bind", f"axis {axes[q].name!r} of the local stage {p.name!r} "
                         f"(computed at {where}) is bound to {tag.value!r}, but its reader "
                         f"{c.name!r} ({st.kind}) runs in {len(vals)} loops bound to "
                         f"{tag.value!r}", "every reader inside exactly one loop bound to "
                         "the same thread index (each thread reads its own elements)",
                         hint=f"bind a loop of {c.name!r} to {tag.value!r}")
                thread = iu.PwMultiAff(f"{{ {st.tuple()} -> [({vals[0]})] }}").get_pw_aff(0)
                for rd in _reads_of(c, st.kind):
                    if rd.source is not p.stage or rd.indices is None:
                        continue
                    acc = _access(c, st, rd.indices, "T")
                    # thread t computes the element y_q = t of the compacted region
                    # (x_q = lo_q + stride_q * t), so that is the one it may read
                    off = acc.get_pw_aff(q).sub(lo.get_pw_aff(q))
                    mine = thread.scale_val(isl.Val.int_from_si(thread.get_ctx(), p.stride[q]))
                    other = off.ne_set(mine).intersect(st.exact)
                    if not other.is_empty():
                        fail("bind", f"axis {axes[q].name!r} of the local stage {p.name!r} "
                             f"(computed at {where}) is bound to {tag.value!r}, each thread "
                             f"keeping its own elements, but {c.name!r} ({st.kind}) reads "
                             f"on thread {tag.value} elements another thread computed, at "
                             f"{other}", f"readers whose loop bound to {tag.value!r} is "
                             f"the index of axis {axes[q].name!r} they read",
                             hint=f"bind the readers' loop over that axis to {tag.value!r}, "
                                  f"or s[{p.name}].set_scope('shared')")


def _inside(stmt_kind: str, reader: StagePlan, target: StagePlan, pos: int) -> bool:
    """Does a ``stmt_kind`` statement of ``reader`` run inside loop ``pos`` of ``target``?"""
    if reader is target:
        return stmt_kind not in ("init", "round") or pos < target.r
    cur = reader
    while cur.attach is not None:
        tp, at = cur.attach
        if tp is target:
            return at >= pos
        cur = tp
    return False


def _reads_of(c: StagePlan, kind: str) -> list[ReadInfo]:
    """The reads performed by statements of ``kind`` of ``c`` (``round`` reads only the
    stage's own accumulator)."""
    if kind == "round":
        return []
    return [rd for rd in c.reads if rd.in_init == (kind == "init")]


def _stmt_kinds_reading(c: StagePlan, p: StagePlan) -> list[str]:
    return [k for k in c.kinds if any(rd.source is p.stage for rd in _reads_of(c, k))]


def check_scope(p: StagePlan, consumers: list[StagePlan]) -> None:
    """Every statement reading an attached stage must run inside its attach loop."""
    if p.attach is None:
        return
    tp, pos = p.attach
    for c in consumers:
        for kind in _stmt_kinds_reading(c, p):
            if not _inside(kind, c, tp, pos):
                fail("compute_at", f"stage {p.name!r} is computed at "
                      f"{tp.name!r}.{tp.leaves[pos].name!r}, but stage {c.name!r} "
                      f"({kind}) also reads it outside that loop",
                      f"attach {p.name!r} where all its consumers run, or compute it "
                      f"at root")


def make_stmts(p: StagePlan, consumers: list[StagePlan], padded: bool) -> None:
    op = p.stage.op
    args = [b.name for b in p.outs if b.scope == "global"]
    if p.stage.align and args:   # any output: _align_root pads all of them
        outs = "" if args == [p.name] else f" (its output {', '.join(map(repr, args))})"
        fail("storage_align", f"stage {p.name!r}{outs} is an argument of the function, "
             "whose array the caller passes compact (row-major)", "an intermediate stage",
             hint=f"align a cache stage instead: s.cache_write({p.name}, ...) or a "
             "cache_read of its consumer")
    root = {iv: (iv.dom.min, iv.dom.extent) for iv in p.root_axes}
    if p.attach is not None:
        if p.stage.layouts:
            tp, pos = p.attach
            fail("transform_layout", f"stage {p.name!r} has a transformed layout and is "
                 f"computed at {tp.name!r}.{tp.leaves[pos].name!r}, where its buffer holds "
                 "only the region that loop needs", "a transformed stage at root",
                 hint=f"s[{p.name}].compute_root(), or transform the consumer's layout")
        _region(p, consumers, padded)
        if p.buffer.scope == "global":   # an argument: its own array, written in place
            _in_place(p, padded)
            ext = list(op.output(0).shape)
        else:
            ext = _extents(p.footprint, p.lo, p.stride)
        if p.owned:
            check_thread_owned(p, consumers)
        p.region = tuple(ext)
        for iv, e in zip(op.axis, ext):
            root[iv] = (0, e)
        if p.buffer.scope != "global":
            scope = p.scope if padded and (p.scope == "shared" or thread_private(p.scope)) \
                else p.buffer.scope
            copies = tuple(e for _, _, _, e in vthread_copies(p))
            # a thread-owned dimension: each thread stores its own slice only
            shape = copies + _aligned(p, [1 if q in p.owned else e for q, e in enumerate(ext)])
            sw = _swizzle(p, shape, scope)
            p.outs = [Buffer(b.name, shape, t.dtype, scope, sw)
                      for b, t in zip(p.outs, op.outputs)]
            p.buffer = p.outs[0]
    elif p.stage.swizzled != "none":
        fail("swizzle", f"stage {p.name!r} is computed at root", "a shared stage attached "
             "with compute_at (a tile of a cache_read in the k loop)",
             hint=f"s[{p.name}].compute_at(s[<consumer>], <k loop>)")
    elif p.stage.align:
        _align_root(p)
    p.ranges = iter_ranges(p.stage, root)
    p.leaf_aff = leaf_affines(p.stage, {iv: f"d{k}" for k, iv in enumerate(p.root_axes)},
                              p.ranges)
    pre = [f"p{k}" for k in range(p.prefix_len)]
    base = f"S{p.index}"
    p.stmts = []
    for kind in p.kinds:
        st = PolyStmt(base if kind == "compute" else f"{base}_{kind}", p, kind,
                      pre + p.own_names(kind))
        own = [p.leaf_aff[p.leaves[k]] for k in p.stmt_loops(kind)]
        slots = [f"p{p.prefix_dims.index(j)}" if j in p.prefix_dims else None
                 for j in range(len(p.prefix))]
        st.sched = slots + own
        _domain(p, st, padded)
        p.stmts.append(st)
    if p.accumulates_wide:
        _accumulator(p, padded)


def _in_place(p: StagePlan, padded: bool) -> None:
    """An argument tensor computed at a loop of its consumer (TVM's schedule_primitives
    tutorial lowers ``[A, B, C]`` with ``B`` computed at ``C``): each iteration computes
    its region into the argument's own array at the tensor's positions (origin 0, no
    compaction). Refused when some element of the tensor is read by no iteration (the
    argument would keep garbage there), when regions of parallel iterations overlap (two
    threads would write and read the same elements), and in a GPU kernel when the regions
    of any two iterations of the loops around it overlap (so that each block or thread
    writes and reads its own elements: at a block loop, the region is computed in the
    block, before a barrier, as for a shared stage)."""
    t = p.stage.op.output(0)
    where = f"{p.attach[0].name!r}.{p.attach[0].leaves[p.attach[1]].name!r}"
    if padded and not p.exact_region.is_injective():
        fail("compute_at", f"stage {p.name!r} is in args and computed at {where} in a GPU "
             "kernel, and the regions of two iterations of the loops around it overlap "
             "(a halo)", "in a GPU kernel, an argument tensor computed at a loop whose "
             "iterations (threads, blocks) each write and read their own elements",
             hint=f"s[{p.name}].compute_root(), or leave {p.name!r} out of the arguments")
    box = iu.tensor_box(t, "T")
    read = p.exact_region.range()
    box = box.align_params(read.get_space())
    missing = box.subtract(read.align_params(box.get_space()))
    ctx = iu.context()
    if ctx is not None:
        missing = missing.intersect_params(ctx.align_params(missing.get_space()))
    if not missing.is_empty():
        fail("compute_at", f"stage {p.name!r} is in args and computed at {where}, which "
             f"reads only part of it: {missing} would never be written",
             "an argument tensor computed at a loop whose iterations read all of it",
             hint=f"s[{p.name}].compute_root(), or leave {p.name!r} out of the arguments")
    par = [q.leaves[k].name for q, k in p.prefix
           if q.stage.annotations.get(q.leaves[k]) is LoopKind.PARALLEL]
    if par and not p.exact_region.is_injective():
        fail("compute_at", f"stage {p.name!r} is in args and computed at {where}, and the "
             f"regions of iterations of the parallel loop {par[0]!r} overlap",
             "regions that parallel iterations do not share (each thread writes and reads "
             "its own elements of the argument)",
             hint=f"s[{p.name}].compute_root(), or leave {p.name!r} out of the arguments")
    zero = None
    for q in range(t.ndim):
        one = isl.PwMultiAff.from_pw_aff(p.footprint.dim_min(q).scale_val(isl.Val(0)))
        zero = one if zero is None else zero.flat_range_product(one)
    p.lo = zero
    p.stride = (1,) * t.ndim


def _accumulator(p: StagePlan, padded: bool) -> None:
    """Set ``p.acc`` and ``p.acc_access``: the wide accumulator of a reduction holds the
    elements one iteration of the loops around the reduction loops (the attach prefix and
    the stage's loops before its first reduction loop) writes, relative to their origin --
    one element when every spatial loop encloses the reduction loops (a register), the
    whole stage when the reduction loops are outermost. On GPUs it is ``local``: the
    ``init``, ``update`` and ``round`` of an element run on one thread, and loops bound
    to thread or block indices count as enclosing ones.

    Virtual threads run interleaved inside the loops around them (``tree.py``), so their
    partial sums are live at the same time: a ``vthread`` loop of the stage never counts
    as enclosing (the accumulator holds what all virtual threads write), and one of the
    consumer's around an attached stage gives the accumulator one copy per virtual thread,
    as :func:`vthread_copies` gives its buffer (fuzz seed cuda 70121: a float16 sum with
    ``j.outer`` bound to ``vthread`` summed both virtual threads in one register)."""
    m, na = p.prefix_len, len(p.axis_vars)
    # loops bound to GPU indices enclose everything (each thread runs its own instances)
    around = [pos for pos in range(len(p.leaves)) if p.binding(pos) is not ThreadTag.VTHREAD
              and (pos < p.r or (p.leaves[pos].iter_type != "reduce"
                                 and p.binding(pos) is not None))]

    def outer(st: PolyStmt) -> isl.PwMultiAff:
        vals = st.dims[:m] + [f"({p.leaf_aff[p.leaves[pos]]})" for pos in around]
        return iu.PwMultiAff(f"{{ {st.tuple()} -> [{', '.join(vals)}] }}")

    def coords(st: PolyStmt) -> isl.PwMultiAff:
        return iu.PwMultiAff(f"{{ {st.tuple()} -> [{', '.join(st.dims[m:m + na])}] }}")

    init = p.stmts[0]
    written = isl.Map.from_pw_multi_aff(outer(init)).intersect_domain(init.domain)
    fp = written.reverse().apply_range(isl.Map.from_pw_multi_aff(coords(init)))
    lo = None
    for q in range(na):
        one = isl.PwMultiAff.from_pw_aff(fp.dim_min(q))
        lo = one if lo is None else lo.flat_range_product(one)
    shape = tuple(_extents(fp, lo, (1,) * na)) if na else ()
    copies = vthread_copies(p) if p.attach is not None else []
    shape = tuple(e for _, _, _, e in copies) + shape
    scope = "local" if padded else "intermediate"
    p.acc = Buffer(f"{p.buffer.name}_acc", shape, accumulation_dtype(p.body), scope)
    for st in p.stmts:
        idx = coords(st)
        if na:
            idx = idx.sub(lo.pullback_pw_multi_aff(outer(st)))
        if copies:   # the copy of this virtual thread
            vt = ", ".join(f"p{k} - {iu.num(first)}" for k, _, first, _ in copies)
            idx = iu.PwMultiAff(f"{{ {st.tuple()} -> [{vt}] }}").flat_range_product(idx)
        p.acc_access[st.name] = iu.name_range(idx, "B")


def vthread_copies(p: StagePlan) -> list[tuple[int, int, int, int]]:
    """The ``vthread`` loops enclosing attached stage ``p`` whose iterations each get a
    private copy of its buffer, as ``(prefix coordinate, prefix position, loop min, loop
    extent)``. A virtual thread is a thread (TVM): what it computes in its loops is its own,
    so the buffer gets one leading dimension per such loop; lowering interleaves the
    virtual threads (``tree.py``), and their copies are then live at the same time. A
    ``shared`` buffer is common to all of them (its prefix is relaxed over them)."""
    out = []
    for k, j in enumerate(p.prefix_dims):
        q, pos = p.prefix[j]
        if q.binding(pos) is ThreadTag.VTHREAD:
            if q.leaves[pos] not in q.ranges:
                raise InternalError(f"loop ranges of {q.name} are needed before {p.name}")
            lo, ext = q.ranges[q.leaves[pos]]
            out.append((k, j, lo, ext))
    return out


def _own_exact(p: StagePlan, kind: str) -> str:
    ivs = p.root_axes if kind == "update" else list(p.stage.op.axis)
    return iu.box_str(p.own_names(kind), [p.ranges[iv] for iv in ivs])


def _domain(p: StagePlan, st: PolyStmt, padded: bool) -> None:
    na = len(p.axis_vars)
    own = p.own_names(st.kind)
    m = p.prefix_len
    if p.attach is None:
        exact = iu.restrict(iu.Set(f"{{ {st.tuple()} : {_own_exact(p, st.kind)} }}"))
        st.axis_map = iu.PwMultiAff(f"{{ {st.tuple()} -> AX[{', '.join(own)}] }}")
    else:
        rel = _offsets(p.exact_region, p.lo).apply_range(_compaction(p.stride))
        flat = rel.wrap().flatten()
        if st.kind == "update":
            src = [f"z{k}" for k in range(m + na)]
            rn = own[na:]
            rbox = iu.box_str(rn, [p.ranges[iv] for iv in p.stage.op.reduce_axis])
            flat = flat.apply(iu.Map(f"{{ [{', '.join(src)}] -> [{', '.join(src + rn)}] : "
                                      f"{rbox} }}"))
        exact = flat.set_tuple_name(st.name)
        proj = iu.PwMultiAff(f"{{ {st.tuple()} -> [{', '.join(st.dims[:m])}] }}")
        lo = p.lo.pullback_pw_multi_aff(proj)
        y = iu.PwMultiAff(f"{{ {st.tuple()} -> "
                           f"[{', '.join(f'{s}*{d}' for s, d in zip(p.stride, own[:na]))}] }}")
        x = y.add(lo)
        if st.kind == "update":
            x = x.flat_range_product(
                iu.PwMultiAff(f"{{ {st.tuple()} -> [{', '.join(own[na:])}] }}"))
        st.axis_map = iu.name_range(x, "AX")
    if st.kind == "update" and p.where is not None:
        cond = iu.Set(f"{{ {ax_space(p, 'update')} : {p.where} }}")
        exact = exact.intersect(cond.preimage_pw_multi_aff(st.axis_map))
    st.exact = exact
    if not padded:
        st.domain = exact
        return
    roots = p.root_axes if st.kind == "update" else list(p.stage.op.axis)
    box = padded_box(p.stage, roots, [p.leaves[k] for k in p.stmt_loops(st.kind)], p.ranges)
    if m:
        # every prefix some padded consumer instance runs at, even one whose region is
        # clipped away: its instances are guarded off, but the domain stays one box per
        # thread, so no guard on thread indices lands above the stage's barriers
        prefixes = p.prefixes
        full = prefixes.flat_product(box)
    else:
        full = box
    st.domain = full.set_tuple_name(st.name)
    if not st.domain.is_subset(exact):
        st.guard = exact.gist(_context_of(st.domain))


def _context_of(domain: isl.Set) -> isl.Set:
    """What a guard on ``domain`` may be simplified against: the domain, or, where it has
    existential variables, the domain without them (a superset, so the guard stays exact
    on the domain). A padded box over a loop fused, split, reordered, fused and split
    again has existentials with large coefficients, and the gist against it took 2.4 s
    (fuzz seed cuda 7464); without them, 1 ms."""
    divs = []
    domain.foreach_basic_set(lambda b: divs.append(b.dim(isl.dim_type.div)))
    return domain.remove_divs() if any(divs) else domain


def _region(p: StagePlan, consumers: list[StagePlan], padded: bool) -> None:
    """Set ``p.footprint`` (prefix -> region, in tensor coordinates), ``p.exact_region``
    (the elements really read) and ``p.lo`` (the region's origin per prefix).

    Padded (GPU): the region is what the consumers' padded loops would read, so that
    prefixes get regions of one shape; the statements of ``p`` are then guarded by the
    exact region. It is clipped to the tensor, as on the CPU: guarded-off consumer
    iterations past the end of a thread box "read" far outside it (case F6: a 3809-element
    buffer per thread for a 31-element tensor)."""
    needed = exact = None
    for c in consumers:
        for st in c.stmts:
            if st.kind not in _stmt_kinds_reading(c, p):
                continue
            vals = [st.sched[j] for j in p.prefix_dims]
            if any(v is None for v in vals):
                loops = []
                for j, v in zip(p.prefix_dims, vals):
                    q, k = p.prefix[j]
                    tag = q.binding(k)
                    if v is None:
                        loops.append(f"{q.name!r}.{q.leaves[k].name!r}"
                                     + (f" ({tag.value})" if tag is not None else ""))
                raise LoweringError(format_error(
                    "compute_at", f"stage {c.name!r} ({c.scope}) reads {p.name!r}, a "
                    f"{p.scope} buffer with a copy per iteration of the loops "
                    f"{', '.join(loops)} it is computed inside, but {c.name!r} runs across "
                    "those loops (a shared stage covers the whole block), so it would read "
                    "copies that other threads or iterations computed",
                    f"attach {p.name!r} outside those loops, or give it a 'shared' buffer "
                    f"(or {c.name!r} a 'local' one)"))
            pre = iu.Map(f"{{ {st.tuple()} -> [{', '.join(f'({v})' for v in vals)}] }}")
            for rd in _reads_of(c, st.kind):
                if rd.source is not p.stage:
                    continue
                if rd.indices is None:
                    fail("compute_at", f"stage {c.name!r} reads {p.name!r} at a non-affine "
                          f"index {rd.node}", f"attach only stages read with affine indices "
                          f"(or compute {p.name!r} at root)")
                acc = isl.Map.from_pw_multi_aff(_access(c, st, rd.indices, "T"))
                ex = pre.reverse().apply_range(acc.intersect_domain(st.exact))
                exact = ex if exact is None else exact.union(ex)
                if padded:
                    nd = pre.reverse().apply_range(acc.intersect_domain(st.domain))
                    needed = nd if needed is None else needed.union(nd)
    if exact is None:
        raise InternalError(f"attached stage {p.name} has no reads")
    t = p.stage.op.output(0)
    box = iu.tensor_box(t, "T")
    p.exact_region = iu.coalesce(exact.intersect_range(box))
    # padded consumers also "read" outside the tensor (guarded-off instances past its end or
    # before its start): clip to the tensor, or the buffer grows with the thread box
    p.footprint = iu.coalesce(needed.intersect_range(box)) if padded else p.exact_region
    p.prefixes = iu.coalesce(needed.domain()) if padded else p.footprint.domain()
    nx = t.ndim
    p.lo = lo = _origin(p.footprint)
    p.stride = tuple(_stride(p.footprint, lo, q) for q in range(nx))


def _origin(footprint: isl.Map) -> isl.PwMultiAff:
    """The region's origin per prefix: the minimum of each tensor dimension. A region of
    one element per prefix (a stage attached at its consumer's innermost loop) is its own
    origin, read off directly: the parametric minimum of a footprint whose prefix is a
    fused loop split and bound (nested floor divisions) took isl minutes (fuzz seed cuda
    7619), the explicit function 10 ms."""
    if footprint.is_single_valued():
        return isl.PwMultiAff.from_map(footprint).reset_tuple_id(isl.dim_type.out)
    lo = None
    for q in range(footprint.dim(isl.dim_type.out)):
        one = isl.PwMultiAff.from_pw_aff(footprint.dim_min(q))
        lo = one if lo is None else lo.flat_range_product(one)
    return lo


#: The last few results of :func:`_offsets`, ``(region, lo, result)``: a plan's footprint
#: is asked for them once per dimension's stride and again for its extents (a third of
#: the time of building the model of a GPU GEMM with vthread tiles).
_RECENT_OFFSETS: list = []


def _offsets(region: isl.Map, lo: isl.PwMultiAff) -> isl.Map:
    """``p -> x - lo(p)``: the positions of a region relative to its origin."""
    for r, o, out in _RECENT_OFFSETS:
        if r is region and o is lo:
            return out
    out = _offsets_of(region, lo)
    _RECENT_OFFSETS.insert(0, (region, lo, out))
    del _RECENT_OFFSETS[4:]
    return out


def _offsets_of(region: isl.Map, lo: isl.PwMultiAff) -> isl.Map:
    region = region.reset_tuple_id(isl.dim_type.out)
    shift = isl.Map.from_pw_multi_aff(lo.neg())
    # symbolic sizes: both must name the same parameters (in the same order) for sum
    region = region.align_params(shift.get_space())
    shift = shift.align_params(region.get_space())
    return region.sum(shift)


def _stride(footprint: isl.Map, lo: isl.PwMultiAff, q: int) -> int:
    """The lattice step of dimension ``q`` of the region (1 when it is not strided): the
    gcd of the offsets ``x_q - lo_q(p)`` over all prefixes (0 is one of them), from the
    stride and offset isl finds in each piece (reads ``i``, ``i+4``, ``i+8`` are three
    pieces; ``i + 5*j`` one piece with stride 5); checked on the whole set."""
    rel = _offsets(footprint, lo).range()
    n = rel.dim(isl.dim_type.set)
    line = rel.project_out(isl.dim_type.set, q + 1, n - q - 1).project_out(
        isl.dim_type.set, 0, q)
    g = 0
    for piece in line.get_basic_sets():
        one = isl.Set.from_basic_set(piece)
        v = one.plain_get_val_if_fixed(isl.dim_type.set, 0)
        if v.is_int():
            g = math.gcd(g, v.to_python())
            continue
        info = one.get_stride_info(0)
        s, off = info.get_stride(), info.get_offset().get_constant_val()
        if not (s.is_int() and off.is_int()):
            return 1
        g = math.gcd(g, s.to_python(), off.to_python())
    if g <= 1:
        return 1
    lattice = iu.Set(f"{{ [z] : exists (e : z = {g}*e) }}")
    return g if line.is_subset(lattice) else 1


def _compaction(stride: tuple) -> isl.Map:
    """``[z] -> [y] : z = stride*y``: offsets in the tensor to buffer positions."""
    zs = [f"z{k}" for k in range(len(stride))]
    ys = [f"y{k}" for k in range(len(stride))]
    cond = " and ".join(f"{z} = {s}*{y}" for z, y, s in zip(zs, ys, stride)) or "1 = 1"
    return iu.Map(f"{{ [{', '.join(zs)}] -> [{', '.join(ys)}] : {cond} }}")


def _swizzle(p: StagePlan, shape: tuple, scope: str) -> str:
    """The swizzle mode of the buffer of attached stage ``p`` (``Stage.swizzle``), after
    checking that its ``shape`` is whole rows of the mode's width, 8 rows at a time."""
    mode = p.stage.swizzled
    if mode == "none":
        return mode
    from polytile.targets.cuda.wgmma import SWIZZLE_ROW_BYTES

    if scope != "shared":
        fail("swizzle", f"stage {p.name!r} is in scope {scope!r}", "a shared buffer",
             hint=f"s[{p.name}].set_scope('shared')")
    if p.stage.align:
        fail("swizzle", f"stage {p.name!r} is also padded by storage_align", "no padding "
             "(the swizzle already spreads the rows over the banks)")
    if not all(sym.is_static(e) for e in shape):
        fail("swizzle", f"the buffer of stage {p.name!r} has the symbolic shape "
             f"{[sym.text(e) for e in shape]}", "a constant shape")
    width = SWIZZLE_ROW_BYTES[mode]
    shape = [int(e) for e in shape]
    row = shape[-1] * dt.nbytes(p.buffer.dtype) if shape else 0
    rows = 1
    for e in shape[:-1]:
        rows *= e
    if row != width or rows % 8:
        fail("swizzle", f"the buffer of stage {p.name!r} is {list(shape)} "
             f"{p.buffer.dtype} (rows of {row} bytes, {rows} rows)", f"rows of exactly "
             f"{width} bytes for the {mode} swizzle, a multiple of 8 of them",
             hint="split the k loop so that the tile is "
             f"{width // max(dt.nbytes(p.buffer.dtype), 1)} elements wide, or choose the "
             "swizzle of the tile's row width (128B, 64B, 32B)")
    return mode


def _aligned(p: StagePlan, ext: list[int]) -> tuple:
    """The buffer shape of an attached stage: its region's box, with dimension ``q+1``
    padded so that the stride of dimension ``q`` is ``k*factor + offset`` for each
    ``storage_align(axis q, factor, offset)``."""
    shape = list(ext)
    if p.stage.align and not all(sym.is_static(e) for e in shape):
        fail("storage_align", f"the buffer of stage {p.name!r} has the symbolic shape "
             f"{[sym.text(e) for e in shape]}", "a constant shape to pad",
             hint="compute the stage at a loop whose region has a constant size")
    for q, (factor, offset) in sorted(p.stage.align.items()):
        if q + 1 >= len(shape):
            fail("storage_align", f"axis {q} of stage {p.name!r} is its innermost dimension "
                  f"(stride 1)", "align an outer axis")
        inner = 1
        for e in shape[q + 2:]:
            inner *= e
        e = shape[q + 1]
        for pad in range(factor + 1):
            if ((e + pad) * inner) % factor == offset:
                shape[q + 1] = e + pad
                break
        else:
            fail("storage_align", f"no padding of axis {q + 1} of stage {p.name!r} makes the "
                  f"stride {offset} modulo {factor}", "choose another factor/offset")
    return tuple(shape)


def _align_root(p: StagePlan) -> None:
    """Pad the buffer of intermediate stage ``p`` computed at root for its
    ``storage_align``, as TVM pads every buffer it allocates."""
    if p.stage.layouts:
        fail("storage_align", f"stage {p.name!r} also has a transform_layout",
             "one of storage_align and transform_layout per stage")
    shape = _aligned(p, list(p.buffer.shape))
    p.outs = [Buffer(b.name, shape, b.dtype, b.scope, b.swizzle, b.packs) for b in p.outs]
    p.buffer = p.outs[0]


def _extents(footprint: isl.Map, lo: isl.PwMultiAff, stride: tuple) -> list[int]:
    """The bounding box of the (compacted) region relative to its origin, over all
    prefixes: the largest ``(x - lo(p)) / stride`` plus one per dimension (``max_val`` of
    ``dim_max - dim_min`` is refused by isl for quasi-affine pieces; the relative set's
    maximum is not)."""
    rel = _offsets(footprint, lo).range()
    if rel.is_empty():  # nothing is read (a zero-size consumer): an empty buffer
        return [0] * len(stride)
    out = []
    for q, s in enumerate(stride):
        top = rel.dim_max_val(q)
        if top.is_int():
            out.append(top.to_python() // s + 1)
            continue
        # a region that grows with a symbolic size: its extent is computed at run time
        # (the largest offset over the prefixes, for the parameters' values)
        if not top.is_infty():
            raise LoweringError(f"compute_at: the region of dimension {q} is unbounded")
        pa = _bounded(lambda: rel.dim_max(q), lambda: rel.remove_divs().dim_max(q))
        if s != 1:
            pa = pa.scale_down_val(isl.Val(s)).floor()
        pa = pa.add_constant_val(isl.Val(1))
        # its value where something is read (elsewhere the stage runs no iteration)
        pa = _bounded(lambda: pa.gist(pa.domain()).coalesce(), lambda: pa)
        ext = iu.pw_aff_upper_expr(pa)
        if iu.num_or_none(ext) is None:
            raise LoweringError(format_error(
                "compute_at", f"dimension {q} of the region of the attached stage has the "
                f"size {ext}, which depends on the symbolic sizes piecewise",
                "a region whose size is one affine expression of the sizes",
                hint="tile the loop the stage is computed at by a constant factor"))
        ctx = iu.context()
        if ctx is None or not ctx.is_subset(pa.nonneg_set()):
            # negative for sizes where nothing is read: a buffer size is never negative
            ext = binary("max", sym.as_expr(ext), 0)
        out.append(ext)
    return out


#: isl operations (about a million a second) an exact symbolic region size may take
#: before its over-approximation is used instead.
EXACT_SIZE_OPS = 500_000


def _bounded(exact, approx):
    """``exact()``, or ``approx()`` where ``exact`` needs more than
    :data:`EXACT_SIZE_OPS` isl operations. The parametric maximum of a region with many
    quasi-affine pieces (ragged splits, ``i // 2`` and ``i % 3`` reads of a symbolic size)
    took isl 46 s; without the pieces' existential variables (a superset: a maximum at
    least as large, so a buffer at least as large) it takes 1 ms (fuzz seed llvm 75004)."""
    try:
        with iu.operation_limit(EXACT_SIZE_OPS):
            return exact()
    except iu.OperationLimit:
        return approx()


def _access(p: StagePlan, st: PolyStmt, indices: list[str], target: str) -> isl.PwMultiAff:
    """The affine access ``indices`` (over the axes of ``p``) of statement ``st``."""
    ax = iu.PwMultiAff(f"{{ {ax_space(p, st.kind)} -> {target}[{', '.join(indices)}] }}")
    return ax.pullback_pw_multi_aff(st.axis_map)


# accesses ---------------------------------------------------------------------------------


def _relative(acc: isl.PwMultiAff, owner: StagePlan, st: PolyStmt) -> isl.PwMultiAff:
    """``acc - lo(prefix)`` for an access of ``st`` to the buffer of attached ``owner``."""
    if owner.attach is None:
        return iu.name_range(acc, "B")
    vals = [st.sched[j] for j in owner.prefix_dims]
    pre = iu.PwMultiAff(f"{{ {st.tuple()} -> [{', '.join(f'({v})' for v in vals)}] }}")
    lo = owner.lo.pullback_pw_multi_aff(pre)
    rel = acc.reset_tuple_id(isl.dim_type.out).sub(lo)
    if any(s > 1 for s in owner.stride):
        # an exact division on the lattice: isl simplifies floor(5*j/5) to j
        zs = [f"z{k}" for k in range(len(owner.stride))]
        div = ", ".join(z if s == 1 else f"floor({z}/{s})" for z, s in zip(zs, owner.stride))
        rel = iu.PwMultiAff(f"{{ [{', '.join(zs)}] -> [{div}] }}").pullback_pw_multi_aff(rel)
    if owner.owned:   # thread-owned dimensions: this thread's slice, at index 0
        n = len(owner.stride)
        zs = [f"z{k}" for k in range(n)]
        keep = ", ".join("0" if k in owner.owned else z for k, z in enumerate(zs))
        rel = iu.PwMultiAff(f"{{ [{', '.join(zs)}] -> [{keep}] }}").pullback_pw_multi_aff(rel)
    copies = vthread_copies(owner)
    if copies:   # the copy of this virtual thread
        vt = ", ".join(f"({st.sched[j]}) - {iu.num(first)}" for _, j, first, _ in copies)
        rel = iu.PwMultiAff(f"{{ {st.tuple()} -> [{vt}] }}").flat_range_product(rel)
    return iu.name_range(rel, "B")


def accesses(p: StagePlan, plan_of: dict, buffers: dict) -> None:
    """The access of every statement of ``p`` to its buffer (``"w"``), axis values
    (``"ax"``), accumulator (``"acc"``) and each affine read (keyed by the read node), in
    the coordinates of the buffers: regions of attached stages, positions of
    ``transform_layout`` for transformed tensors."""
    na = len(p.axis_vars)
    for st in p.stmts:
        own = st.dims[p.prefix_len:p.prefix_len + na]
        own = ["0" if q in p.owned else d for q, d in enumerate(own)]
        own = [f"p{k} - {iu.num(first)}" for k, _, first, _ in vthread_copies(p)] + own
        w = iu.PwMultiAff(f"{{ {st.tuple()} -> B[{', '.join(own)}] }}")
        st.accesses["w"] = (p.buffer, compose_access(p.stage.layouts, w))
        st.accesses["ax"] = (None, st.axis_map)
        if p.acc is not None:
            st.accesses["acc"] = (p.acc, p.acc_access[st.name])
        for rd in _reads_of(p, st.kind):
            if rd.indices is None:
                continue
            acc = _access(p, st, rd.indices, "B")
            owner = plan_of.get(id(rd.source))
            if owner is None:
                st.accesses[id(rd.node)] = (buffers[rd.source],
                                            compose_access(rd.source.layouts, acc))
            elif owner.attach is None:
                st.accesses[id(rd.node)] = (owner.outs[rd.node.tensor.value_index],
                                            compose_access(owner.stage.layouts,
                                                           _relative(acc, owner, st)))
            else:
                st.accesses[id(rd.node)] = (owner.outs[rd.node.tensor.value_index],
                                            _relative(acc, owner, st))
