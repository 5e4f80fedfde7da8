"""Schedule checks that need the whole schedule but no isl: run first by ``lower``."""

from __future__ import annotations

from polytile.errors import ScheduleError, format_error
from polytile.te import symbolic as sym
from polytile.te.expr import IterVar
from polytile.te.tensor import ComputeOp, Operation, Tensor

from .kinds import LoopKind, ThreadTag, annotation_name
from .schedule import Schedule
from .stage import Stage


def check_lower_inputs(sch, args, who: str = "lower") -> None:
    """Check the kinds of ``lower``'s (and ``build``'s) schedule and argument list, so
    that the common mix-ups (a stage for the schedule, a bare tensor for the list, an
    operation for a tensor) are named instead of failing deep inside lowering.

    Raises
    ------
    TypeError
        ``sch`` is not a :class:`Schedule`, ``args`` is not a list or tuple, or an element
        of ``args`` is an operation (``C.op``) or an axis instead of a tensor.
    """
    if not isinstance(sch, Schedule):
        what = type(sch).__name__
        hint = "create one with s = te.create_schedule(C.op)"
        if isinstance(sch, Stage):
            what, hint = f"the stage s[{sch.name}]", "pass the whole schedule s, not s[C]"
        elif isinstance(sch, (Tensor, Operation)):
            what = f"the {'tensor' if isinstance(sch, Tensor) else 'operation'} {sch.name!r}"
        raise TypeError(format_error(who, f"got {what} where the schedule was expected",
                                     "expected a Schedule", hint=hint))
    if args is not None and not isinstance(args, (list, tuple)):
        name = getattr(args, "name", type(args).__name__)
        raise TypeError(format_error(who, f"args is the {type(args).__name__} {name!r}, not a "
                                     "list",
                                     "expected a list of tensors and te.var",
                                     hint=f"wrap it in a list: [..., {name}]"))
    for k, a in enumerate(args or ()):
        if isinstance(a, Operation):
            raise TypeError(format_error(
                who, f"args[{k}] is the operation {a.name!r} (like C.op)",
                "expected its tensor", hint=f"pass {a.name} (or {a.name}.op.output(0))"))
        if isinstance(a, IterVar):
            raise TypeError(format_error(
                who, f"args[{k}] is the iter_var {a.var.name!r}",
                "expected tensors and scalar te.var", hint="axes are not function arguments"))


def _writes_nothing(st) -> bool:
    """True for a stage with a zero-size output: its kernel need not run (the runtime
    launches nothing), so binding its empty loops is harmless."""
    return any(iv.dom is not None and iv.dom.extent == 0 for iv in st.op.axis)


def _check_pipelined_loops(st, leaves) -> None:
    """Raise ScheduleError when a loop of stage ``st`` marked by ``pipeline()`` is no longer
    one of its ``leaves`` (split or fused afterwards)."""
    from .passes.pipeline_slots import pipeline_subject

    for iv, prs in st.pragmas.items():
        p = next((v for k, v in prs if k == "software_pipeline"), None)
        if p is not None and iv not in leaves:
            if p.via:
                subject = pipeline_subject(p, "the loop was split or fused after "
                                              "double_buffer()")
            else:
                subject = ("pipeline", f"loop {iv.name!r} of stage {st.name!r} was split or "
                           "fused after s[...].pipeline()")
            raise ScheduleError(format_error(
                *subject, "pipeline a current loop of the stage",
                hint=f"call {'double_buffer' if p.via else 'pipeline'}() after the splits, "
                "on the loop the copies are computed at"))


def _check_env_threads(st) -> None:
    """Raise ScheduleError when a thread axis given to ``env_threads`` of scan ``st`` is
    bound to no loop of the scan."""
    tags = {k.value for k in st.annotations.values() if isinstance(k, ThreadTag)}
    for t in st.env_thread_axes:
        if t.thread_tag not in tags:
            raise ScheduleError(format_error(
                "env_threads", f"thread axis {t.thread_tag!r} of te.scan {st.name!r} is "
                "bound to no loop of the scan", "each env thread bound to an axis of the "
                "scan's update (or init)", hint=f"s[update].bind(axis, {t.var.name})"))


def _check_prefetch_loops(st, leaves) -> None:
    """Raise ScheduleError when a loop of stage ``st`` given to ``prefetch()`` is no
    longer a loop of the stage or no longer runs one iteration after another."""
    for iv, prs in st.pragmas.items():
        if not any(k == "prefetch" for k, _ in prs):
            continue
        kind = st.annotations.get(iv)
        if iv not in leaves:
            what = "was split or fused after s[...].prefetch()"
        elif kind in (LoopKind.VECTORIZED, LoopKind.UNROLLED) or isinstance(kind, ThreadTag):
            what = f"is annotated {annotation_name(kind)!r}"
        else:
            continue
        raise ScheduleError(format_error(
            "prefetch", f"loop {iv.name!r} of stage {st.name!r} {what}",
            "a serial or parallel loop of the stage (its iterations come one after another)",
            hint="prefetch the loop outside it"))


def _check_stage_marks(st, leaves) -> None:
    """Raise ScheduleError when a loop mark of stage ``st`` (software pipeline, prefetch,
    env threads, rolling buffer) no longer fits its loops or its attachment."""
    _check_pipelined_loops(st, leaves)
    _check_prefetch_loops(st, leaves)
    _check_env_threads(st)
    if st.rolling and st.attach_type != "scope":
        raise ScheduleError(format_error(
            "rolling_buffer", f"stage {st.name!r} is computed at the root",
            "a stage computed at a loop of its consumer (compute_at)",
            hint="a rolling buffer keeps the rows of a window that slides with the "
            "consumer's loop"))


def hoist_out_of_vector_loops(sch: Schedule) -> Schedule:
    """A stage computed at a vectorized loop (``compute_at(s[C], v)``, ``v`` vectorized)
    computes, per vector iteration, the region all the lanes of ``v`` read: it is
    computed at the loop around ``v`` (or where its consumer is computed, when ``v`` is
    the consumer's outermost loop). TVM widens the stage's buffer by the lanes and runs its
    loops over vectors; the values are the same, a pure stage's region for all lanes being
    computed before the lanes read it. Returns a copy of ``sch`` (the user's schedule is
    unchanged), or ``sch`` itself when no stage is computed at a vectorized loop."""
    def at_vector_loop(x):
        return [st for st in x.stages if st.attach_type == "scope" and st.attach_stage.
                annotations.get(st.attach_ivar) is LoopKind.VECTORIZED]

    if not at_vector_loop(sch):
        return sch
    sch = sch.copy()
    while True:   # (a hoist to the consumer's own vectorized attach loop goes on)
        todo = at_vector_loop(sch)
        if not todo:
            return sch
        st = todo[0]
        cons = st.attach_stage
        leaves = cons.leaf_iter_vars
        pos = leaves.index(st.attach_ivar)
        if pos:
            st.compute_at(cons, leaves[pos - 1])
        elif cons.attach_type == "scope":
            st.compute_at(cons.attach_stage, cons.attach_ivar)
        else:
            st.compute_root()


def interchange_outer_vectorized(sch: Schedule) -> Schedule:
    """Outer-loop vectorization (TVM, Halide): a vectorized spatial loop with serial loops
    inside it runs those loops once over vectors of lanes. For a loop that carries no
    dependence (a spatial axis of its stage) and inner loops whose extents do not depend
    on it, that is the nest with the vectorized loop moved innermost, which is what this
    returns: a copy of ``sch`` (the user's schedule is unchanged), or ``sch`` itself when
    no vectorized loop has loops inside.

    Rewrite (int8 matmul, ``j.inner`` vectorized)::

        for j.inner (vectorized):          for k:
          for k:                     ->      for j.inner (vectorized):
            C[i, j] += A[i, k] * B[k, j]       C[i, j] += A[i, k] * B[k, j]

    A stage computed at a loop inside the vectorized one stays at that loop, now around
    the vectorized loop: it computes the region of all the lanes (what TVM's vectorizer
    does by widening its buffer), the same values.

    Raises
    ------
    ScheduleError
        When a loop inside the vectorized one is parallel, vectorized, tensorized or bound
        to a GPU index.
    """
    moves = []
    for st in sch.stages:
        if not isinstance(st.op, ComputeOp) or st.attach_type == "inline":
            continue
        leaves = st.leaf_iter_vars
        _check_stage_marks(st, leaves)
        for iv, kind in st.annotations.items():
            if kind is not LoopKind.VECTORIZED or iv.iter_type != "data_par":
                continue
            pos = leaves.index(iv)
            inner = leaves[pos + 1:]
            if not inner:
                continue
            for v in inner:
                k = st.annotations.get(v)
                if k not in (None, LoopKind.SERIAL, LoopKind.UNROLLED):
                    raise ScheduleError(format_error(
                        "vectorize", f"loop {iv.name!r} of stage {st.name!r} has the "
                        f"{getattr(k, 'value', 'tensorized')} loop {v.name!r} inside it",
                        "serial or unrolled loops inside a vectorized loop (they run once "
                        "over vectors of lanes)", hint=f"reorder so that {iv.name!r} comes "
                        f"inside {v.name!r}"))
            moves.append((st.name, pos))
    if not moves:
        return sch
    sch = sch.copy()
    for name, pos in moves:
        st = next(x for x in sch.stages if x.name == name)
        leaves = st.leaf_iter_vars
        st.reorder(*leaves[pos + 1:], leaves[pos])
    return sch


def vthreads_as_loops(sch: Schedule) -> Schedule:
    """For a CPU target: every loop bound to ``vthread`` as an unrolled loop (serial when
    its extent is symbolic). TVM lowers a virtual thread on any target by copying the body
    once per virtual thread in order (``InjectVirtualThread``), which on a CPU is what an
    unrolled loop is; the GPU indices proper (``blockIdx``/``threadIdx``) stay refused by
    ``lower``. Returns a copy of ``sch`` (the user's schedule is unchanged), or ``sch``
    itself when nothing is bound to ``vthread``."""
    marks = [(st.name, st.leaf_iter_vars.index(iv)) for st in sch.stages
             for iv, kind in st.annotations.items()
             if kind is ThreadTag.VTHREAD and iv in st.leaf_iter_vars]
    if not marks:
        return sch
    sch = sch.copy()
    for name, pos in marks:
        st = next(x for x in sch.stages if x.name == name)
        iv = st.leaf_iter_vars[pos]
        for table in (st.bound_vars, st.bound_axes, st.thread_extents):
            table.pop(iv, None)
        if sym.is_static(st.extent_of(iv)):
            st.annotations[iv] = LoopKind.UNROLLED
        else:
            del st.annotations[iv]
    return sch


def validate_schedule(sch: Schedule) -> None:
    """Check annotations that constrain the loop structure.

    Raises
    ------
    ScheduleError
        When a vectorized loop is not the innermost loop of its stage (a reduction loop
        with loops inside), or a loop without iterations is bound to a GPU index (unless
        the stage's output has no elements: nothing is launched for it).
    """
    for st in sch.stages:
        if not isinstance(st.op, ComputeOp) or st.attach_type == "inline":
            continue
        leaves = st.leaf_iter_vars
        _check_stage_marks(st, leaves)
        for iv, kind in st.annotations.items():
            if (isinstance(kind, ThreadTag) and kind.is_hardware
                    and sym.static(st.extent_of(iv)) == 0 and not _writes_nothing(st)):
                raise ScheduleError(format_error(
                    "bind", f"loop {iv.name!r} of stage {st.name!r} has no iterations (an "
                    f"empty reduce range or dimension) and is bound to {kind.value!r}",
                    "a GPU launch needs at least one block and one thread per index",
                    hint="leave the empty loop unbound (a reduction over it yields its "
                    "initial value)"))
            if kind is not LoopKind.VECTORIZED:
                continue
            pos = leaves.index(iv)
            inner = leaves[pos + 1:]
            if inner and iv.iter_type == "reduce":
                # (a spatial loop with loops inside was moved innermost before this)
                raise ScheduleError(format_error(
                    "vectorize", f"loop {iv.name!r} of stage {st.name!r} is a reduction "
                    "loop with loops inside it: as vector lanes its iterations would update "
                    "the same elements together", "a spatial loop (the loops inside a "
                    "vectorized spatial loop run once over vectors of lanes)",
                    Loops_inside=", ".join(v.name for v in inner),
                    hint=f"vectorize a spatial loop, or rfactor {st.name!r} over "
                    f"{iv.name!r} and vectorize a spatial loop of the rfactor stage"))
            if inner:
                raise ScheduleError(format_error(
                    "vectorize", f"loop {iv.name!r} of stage {st.name!r} is not innermost",
                    "only the innermost loop can run as vector lanes",
                    Loops_inside=", ".join(v.name for v in inner),
                    hint=f"reorder so that {iv.name!r} comes last"))



def check_store_predicates(sch: Schedule, gpu: bool) -> None:
    """Each ``set_store_predicate`` must only skip duplicate stores: on a GPU, on thread
    indices the stage does not bind itself, for a stage at root or in ``shared`` memory.

    Raises
    ------
    ScheduleError
        Naming the stage, the predicate and what would be left unwritten.
    """
    for st in sch.stages:
        pred = st.store_predicate
        if pred is None or st.attach_type == "inline":
            continue
        tags = set(st.store_predicate_tags.values())
        if tags and not gpu:
            raise ScheduleError(format_error(
                "set_store_predicate", f"stage {st.name!r} stores only where {pred}, but the "
                "schedule runs on the CPU, which has no thread indices",
                "bind loops to GPU indices, or drop the predicate"))
        own = [(iv, k) for iv, k in st.annotations.items()
               if k in tags and iv.iter_type != "reduce"]
        if own:
            iv, k = own[0]
            raise ScheduleError(format_error(
                "set_store_predicate", f"stage {st.name!r} stores only where {pred}, but "
                f"binds its own loop {iv.name!r} to {k.value!r}: the elements of the other "
                f"values of {k.value!r} would be left unwritten",
                "a predicate on thread indices the stage's loops do not bind (it skips "
                "the duplicate stores of threads that compute the same elements)"))
        if st.attach_type == "scope" and st.scope != "shared":
            raise ScheduleError(format_error(
                "set_store_predicate", f"stage {st.name!r} stores only where {pred} and is "
                f"computed at {st.attach_stage.name!r}.{st.attach_ivar.name!r} in "
                f"{st.scope or 'its default'} memory: a thread that skips its stores would "
                "read its own copy unwritten", "a stage at root or in shared memory",
                hint=f"s[{st.name}].set_scope('shared')"))
