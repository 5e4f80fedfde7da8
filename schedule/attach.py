"""Attached stages (``compute_at`` and cache stages): prefixes, regions, domains, accesses.

A stage computed inside a loop of another runs, for each value ``p`` of its *prefix* (the
loops that enclose it), the region of its tensor its consumers read there: the image of
their accesses under the reversed prefix map (exact, halos and ragged tiles included;
isl manual, "Basic Operations"; Tiramisu's ``compute_needed_and_produced``). The region's
bounding box is its buffer; its loops iterate relative to the region's origin ``lo(p)``.
A ``shared`` buffer is relaxed over thread indices (one region per block); any other
buffer inside ``vthread`` loops gets one copy per virtual thread (``vthread_copies``).
"""

from __future__ import annotations

import islpy as isl

from polytile.errors import InternalError, LoweringError, format_error
from polytile.te.tensor import Tensor

from . import isl_util as iu
from .loop_ir import Buffer
from .loopmap import iter_ranges, leaf_affines, padded_box
from .model import PolyStmt, ReadInfo, StagePlan, _fail


def ax_space(p: StagePlan, kind: str) -> str:
    return iu.tuple_str("AX", p.own_names(kind))


def _is_thread_tag(tag: str | None) -> bool:
    return tag is not None and (tag.startswith("threadIdx") or tag == "vthread")


def set_prefix(p: StagePlan, gpu: bool) -> None:
    if p.attach is None:
        p.prefix, p.prefix_dims = [], []
        return
    tp, pos = p.attach
    p.prefix = tp.prefix + [(tp, k) for k in range(pos + 1)]
    if gpu and not p.stage.scope:
        from .gpu import default_scope

        p.scope = default_scope(p)
    # a shared buffer holds the region of a whole block: relax thread loops (TVM)
    relax = p.scope == "shared"
    p.prefix_dims = [j for j, (q, k) in enumerate(p.prefix)
                     if not (relax and _is_thread_tag(q.binding(k)))]


def _inside(stmt_kind: str, reader: StagePlan, target: StagePlan, pos: int) -> bool:
    """Does a ``stmt_kind`` statement of ``reader`` run inside loop ``pos`` of ``target``?"""
    if reader is target:
        return stmt_kind != "init" or pos < target.r
    cur = reader
    while cur.attach is not None:
        tp, at = cur.attach
        if tp is target:
            return at >= pos
        cur = tp
    return False


def _reads_of(c: StagePlan, kind: str) -> list[ReadInfo]:
    """The reads performed by statements of ``kind`` of ``c``."""
    return [rd for rd in c.reads if rd.in_init == (kind == "init")]


def _stmt_kinds_reading(c: StagePlan, p: StagePlan) -> list[str]:
    kinds = ["init", "update"] if c.is_reduction else ["compute"]
    return [k for k in kinds if any(rd.source is p.stage for rd in _reads_of(c, k))]


def check_scope(p: StagePlan, consumers: list[StagePlan]) -> None:
    """Every statement reading an attached stage must run inside its attach loop."""
    if p.attach is None:
        return
    tp, pos = p.attach
    for c in consumers:
        for kind in _stmt_kinds_reading(c, p):
            if not _inside(kind, c, tp, pos):
                _fail("compute_at", f"stage {p.name!r} is computed at "
                      f"{tp.name!r}.{tp.leaves[pos].name!r}, but stage {c.name!r} "
                      f"({kind}) also reads it outside that loop",
                      f"attach {p.name!r} where all its consumers run, or compute it "
                      f"at root")


def make_stmts(p: StagePlan, consumers: list[StagePlan], padded: bool) -> None:
    op = p.stage.op
    root = {iv: (iv.dom.min, iv.dom.extent) for iv in p.root_axes}
    if p.attach is not None:
        _region(p, consumers, padded)
        ext = _extents(p.footprint, p.lo, len(p.axis_vars))
        p.region = tuple(ext)
        for iv, e in zip(op.axis, ext):
            root[iv] = (0, e)
        t = op.output(0)
        scope = p.scope if padded and p.scope in ("shared", "local") else p.buffer.scope
        copies = tuple(e for _, _, _, e in vthread_copies(p))
        p.buffer = Buffer(p.buffer.name, copies + _aligned(p, ext), t.dtype, scope)
    p.ranges = iter_ranges(p.stage, root)
    p.leaf_aff = leaf_affines(p.stage, {iv: f"d{k}" for k, iv in enumerate(p.root_axes)},
                              p.ranges)
    pre = [f"p{k}" for k in range(p.prefix_len)]
    base = f"S{p.index}"
    p.stmts = []
    for kind in (["init", "update"] if p.is_reduction else ["compute"]):
        st = PolyStmt(base if kind == "compute" else f"{base}_{kind}", p, kind,
                      pre + p.own_names(kind))
        own = [p.leaf_aff[p.leaves[k]] for k in p.stmt_loops(kind)]
        slots = [f"p{p.prefix_dims.index(j)}" if j in p.prefix_dims else None
                 for j in range(len(p.prefix))]
        st.sched = slots + own
        _domain(p, st, padded)
        p.stmts.append(st)


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
        if q.binding(pos) == "vthread":
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
        exact = isl.Set(f"{{ {st.tuple()} : {_own_exact(p, st.kind)} }}")
        st.axis_map = isl.PwMultiAff(f"{{ {st.tuple()} -> AX[{', '.join(own)}] }}")
    else:
        rel = p.exact_region.reset_tuple_id(isl.dim_type.out).sum(
            isl.Map.from_pw_multi_aff(p.lo.neg()))
        flat = rel.wrap().flatten()
        if st.kind == "update":
            src = [f"z{k}" for k in range(m + na)]
            rn = own[na:]
            rbox = iu.box_str(rn, [p.ranges[iv] for iv in p.stage.op.reduce_axis])
            flat = flat.apply(isl.Map(f"{{ [{', '.join(src)}] -> [{', '.join(src + rn)}] : "
                                      f"{rbox} }}"))
        exact = flat.set_tuple_name(st.name)
        proj = isl.PwMultiAff(f"{{ {st.tuple()} -> [{', '.join(st.dims[:m])}] }}")
        lo = p.lo.pullback_pw_multi_aff(proj)
        y = isl.PwMultiAff(f"{{ {st.tuple()} -> [{', '.join(own[:na])}] }}")
        x = y.add(lo)
        if st.kind == "update":
            x = x.flat_range_product(isl.PwMultiAff(f"{{ {st.tuple()} -> [{', '.join(own[na:])}] }}"))
        st.axis_map = iu.name_range(x, "AX")
    if st.kind == "update" and p.where is not None:
        cond = isl.Set(f"{{ {ax_space(p, 'update')} : {p.where} }}")
        exact = exact.intersect(cond.preimage_pw_multi_aff(st.axis_map))
    st.exact = exact
    if not padded:
        st.domain = exact
        return
    box = padded_box(p, st.kind)
    if m:
        prefixes = p.footprint.domain()
        full = prefixes.flat_product(box)
    else:
        full = box
    st.domain = full.set_tuple_name(st.name)
    if not st.domain.is_subset(exact):
        st.guard = exact.gist(st.domain)


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
                raise LoweringError(format_error(
                    "compute_at", f"stage {c.name!r} reads {p.name!r} from a {c.scope} "
                    f"buffer that does not vary with the loops {p.name!r} is computed in",
                    "attach the reader inside the same thread loops"))
            pre = isl.Map(f"{{ {st.tuple()} -> [{', '.join(f'({v})' for v in vals)}] }}")
            for rd in _reads_of(c, st.kind):
                if rd.source is not p.stage:
                    continue
                if rd.indices is None:
                    _fail("compute_at", f"stage {c.name!r} reads {p.name!r} at a non-affine "
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
    box = tensor_box(t, "T")
    p.exact_region = iu.coalesce(exact.intersect_range(box))
    # padded consumers also "read" outside the tensor (guarded-off instances past its end or
    # before its start): clip to the tensor, or the buffer grows with the thread box
    p.footprint = iu.coalesce(needed.intersect_range(box)) if padded else p.exact_region
    nx = t.ndim
    lo = None
    for q in range(nx):
        one = isl.PwMultiAff.from_pw_aff(p.footprint.dim_min(q))
        lo = one if lo is None else lo.flat_range_product(one)
    p.lo = lo


def _aligned(p: StagePlan, ext: list[int]) -> tuple:
    """The buffer shape of an attached stage: its region's box, with dimension ``q+1``
    padded so that the stride of dimension ``q`` is ``k*factor + offset`` for each
    ``storage_align(axis q, factor, offset)``."""
    shape = list(ext)
    for q, (factor, offset) in sorted(p.stage.align.items()):
        if q + 1 >= len(shape):
            _fail("storage_align", f"axis {q} of stage {p.name!r} is its innermost dimension "
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
            _fail("storage_align", f"no padding of axis {q + 1} of stage {p.name!r} makes the "
                  f"stride {offset} modulo {factor}", "choose another factor/offset")
    return tuple(shape)


def _extents(footprint: isl.Map, lo: isl.PwMultiAff, nx: int) -> list[int]:
    """The bounding box of the region relative to its origin, over all prefixes: the
    largest ``x - lo(p)`` plus one per dimension (``max_val`` of ``dim_max - dim_min``
    is refused by isl for quasi-affine pieces; the relative set's maximum is not)."""
    rel = footprint.reset_tuple_id(isl.dim_type.out).sum(
        isl.Map.from_pw_multi_aff(lo.neg())).range()
    out = []
    for q in range(nx):
        top = rel.dim_max_val(q)
        if not top.is_int():
            raise LoweringError(f"compute_at: the region of dimension {q} is unbounded")
        out.append(top.to_python() + 1)
    return out


def tensor_box(t: Tensor, tname: str) -> isl.Set:
    dims = [f"x{k}" for k in range(t.ndim)]
    return isl.Set(f"{{ {iu.tuple_str(tname, dims)} : "
                   f"{iu.box_str(dims, [(0, s) for s in t.shape])} }}")


def _access(p: StagePlan, st: PolyStmt, indices: list[str], target: str) -> isl.PwMultiAff:
    """The affine access ``indices`` (over the axes of ``p``) of statement ``st``."""
    ax = isl.PwMultiAff(f"{{ {ax_space(p, st.kind)} -> {target}[{', '.join(indices)}] }}")
    return ax.pullback_pw_multi_aff(st.axis_map)


# accesses ---------------------------------------------------------------------------------


def _relative(acc: isl.PwMultiAff, owner: StagePlan, st: PolyStmt) -> isl.PwMultiAff:
    """``acc - lo(prefix)`` for an access of ``st`` to the buffer of attached ``owner``."""
    if owner.attach is None:
        return iu.name_range(acc, "B")
    vals = [st.sched[j] for j in owner.prefix_dims]
    pre = isl.PwMultiAff(f"{{ {st.tuple()} -> [{', '.join(f'({v})' for v in vals)}] }}")
    lo = owner.lo.pullback_pw_multi_aff(pre)
    rel = acc.reset_tuple_id(isl.dim_type.out).sub(lo)
    copies = vthread_copies(owner)
    if copies:   # the copy of this virtual thread
        vt = ", ".join(f"({st.sched[j]}) - {first}" for _, j, first, _ in copies)
        rel = isl.PwMultiAff(f"{{ {st.tuple()} -> [{vt}] }}").flat_range_product(rel)
    return iu.name_range(rel, "B")


def accesses(p: StagePlan, plan_of: dict, buffers: dict) -> None:
    na = len(p.axis_vars)
    for st in p.stmts:
        own = st.dims[p.prefix_len:p.prefix_len + na]
        own = [f"p{k} - {first}" for k, _, first, _ in vthread_copies(p)] + own
        st.accesses["w"] = (p.buffer, isl.PwMultiAff(f"{{ {st.tuple()} -> B[{', '.join(own)}] }}"))
        st.accesses["ax"] = (None, st.axis_map)
        for rd in _reads_of(p, st.kind):
            if rd.indices is None:
                continue
            acc = _access(p, st, rd.indices, "B")
            owner = plan_of.get(id(rd.source))
            if owner is None:
                st.accesses[id(rd.node)] = (buffers[rd.source], acc)
            else:
                st.accesses[id(rd.node)] = (owner.buffer, _relative(acc, owner, st))
