"""TVM's GPU injective schedule over symbolic shapes, as a rewrite of the schedule.

TVM (topi ``schedule_injective`` on CUDA) writes::

    fused = s[C].fuse(*C.op.axis)              # extent m * n
    bx, tx = s[C].split(fused, factor=F)
    s[C].bind(bx, blockIdx.x); s[C].bind(tx, threadIdx.x)

With a symbolic inner extent ``n`` the fused index ``i * n + j`` is not affine, so isl
cannot see that nest. For an injective stage (no reduction, nothing computed inside it)
every iteration is independent, so any mapping of iterations onto threads computes the
same values; :func:`rewrite_fused_splits` lowers the nest as the equivalent

    j.outer, j.inner = split(j, factor=F)
    bind(j.inner, threadIdx.x); bind(j.outer, blockIdx.x)
    bind(i, blockIdx.y)                        # blockIdx.z: the axis before i

a grid of ``ceil(n / F) x m`` blocks of ``F`` threads (computed at each launch) instead of
TVM's ``ceil(m * n / F)`` blocks: the same elements, each computed once; the threads past
the end of a row are idle. Any other use of a split of such a fused loop is refused.
"""

from __future__ import annotations

from polytile.errors import ScheduleError, format_error
from polytile.te import symbolic as sym
from polytile.te.scan import ScanOp
from polytile.te.tensor import ComputeOp
from polytile.te.tensor_intrin import EXTERN_KEY

from .kinds import ThreadTag
from .relations import Fuse, Split, symbolic_fuse
from .schedule import Schedule, create_schedule, replay
from .stage import Stage, thread_axis


def _fused_splits(st: Stage) -> list:
    """The splits of ``st`` whose parent is a fused loop of symbolic extent."""
    fused = {id(r.fused) for r in st.relations if symbolic_fuse(r)}
    return [r for r in st.relations if isinstance(r, Split) and id(r.parent) in fused]


def _why_not(st: Stage, rel: Split) -> str | None:
    """Why the stage is not TVM's GPU injective schedule (None when it is)."""
    op = st.op
    if not isinstance(op, ComputeOp) or isinstance(op, ScanOp) or EXTERN_KEY in op.attrs:
        return "the stage is not a te.compute"
    if op.reduce_axis:
        return "the stage is a reduction"
    if len(op.axis) > 3:
        return f"the stage has {len(op.axis)} axes (at most 3: one per grid dimension)"
    if st.attach_type != "root" or any(o.attach_stage is st for o in st.schedule.stages):
        return "a stage is computed at one of its loops, or it is computed at another's"
    if st.pragmas or st.layouts or st.tensorized or st.store_predicate is not None \
            or st.align:
        return "the stage has pragmas, layouts or other primitives"
    if not all(isinstance(r, Fuse) for r in st.relations if r is not rel) \
            or st.relations[-1] is not rel:
        return "its loops are not one fuse of all axes then this split"
    if list(st.leaf_iter_vars) != [rel.outer, rel.inner]:
        return "its loops are not the two loops of this split"
    bo, ti = st.annotations.get(rel.outer), st.annotations.get(rel.inner)
    if bo is not ThreadTag.BLOCK_X or not (isinstance(ti, ThreadTag) and ti.is_thread):
        return f"{rel.outer.name!r} is not bound to blockIdx.x and {rel.inner.name!r} to a " \
            "threadIdx index"
    return None


def rewrite_fused_splits(sch: Schedule) -> Schedule:
    """``sch``, or a copy in which every stage with TVM's GPU injective schedule over a
    fuse of symbolic extent is scheduled as the equivalent nest of the module docstring.

    Raises
    ------
    ScheduleError
        For any other schedule that splits a fused loop of symbolic extent.
    """
    targets = []
    for st in sch.stages:
        for rel in _fused_splits(st):
            why = _why_not(st, rel)
            if why is not None:
                inner = next(r.inner for r in st.relations
                             if symbolic_fuse(r) and r.fused is rel.parent)
                raise ScheduleError(format_error(
                    "split", f"iter_var {rel.parent.name!r} of stage {st.name!r} fuses a loop "
                    f"of symbolic extent {sym.text(inner.dom.extent)} and is split by "
                    f"{rel.factor}, but {why}", "TVM's GPU injective schedule (fuse all axes, "
                    "split, bind the two loops to blockIdx.x and threadIdx.x) or splits of "
                    "loops of constant extent (the fused index is not affine)",
                    hint="split the inner axis by a constant factor and fuse that part"))
            targets.append((st, rel))
    if not targets:
        return sch
    names = {st.name for st, _ in targets}
    new = replay([x for x in sch.trace if x.stage not in names], create_schedule(sch._roots))
    for st, rel in targets:
        ns = new[st.op]
        axes = list(ns.op.axis)
        jo, ji = ns.split(axes[-1], factor=rel.factor)
        ns.bind(ji, thread_axis(st.annotations[rel.inner].value))
        for ax, tag in zip([jo] + axes[-2::-1], ("blockIdx.x", "blockIdx.y", "blockIdx.z")):
            ns.bind(ax, thread_axis(tag))
    return new
