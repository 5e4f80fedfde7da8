"""DSL-level rewrites that add stages: ``cache_read`` and ``cache_write`` (TVM semantics).

Both run before any polyhedral analysis. They create a new compute op and swap the op of an
existing stage for a rewritten one; the old op keeps mapping to its stage, so tensors the
user already holds (``C``, ``C.op.axis``) stay valid handles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from polytile.errors import ScheduleError, format_error
from polytile.te.expr import IterVar, Range, TensorRead, Var
from polytile.te.scan import ScanOp
from polytile.te.tensor import ComputeOp, PlaceholderOp, Tensor
from polytile.te.visitor import ExprMutator, substituter

from .stage import Stage
from .stage_extras import SCOPES

if TYPE_CHECKING:
    from .schedule import Schedule  # a type hint only: schedule.py imports this module


class _Retarget(ExprMutator):
    """Replace reads of one stage's tensors by reads of another tensor."""

    def __init__(self, old_ops: set, new: Tensor, value_index: int = 0):
        self.old_ops = old_ops
        self.new = new
        self.value_index = value_index   # which output of a multi-output stage

    def visit_TensorRead(self, r: TensorRead):
        idx = tuple(self.visit(i) for i in r.indices)
        if id(r.tensor.op) in self.old_ops and r.tensor.value_index == self.value_index:
            return TensorRead(r.dtype, self.new, idx)
        if any(a is not b for a, b in zip(idx, r.indices)):
            return TensorRead(r.dtype, r.tensor, idx)
        return r


def _check_scope(primitive: str, scope: str) -> None:
    if scope not in SCOPES:
        raise ScheduleError(format_error(primitive, f"unknown scope {scope!r}",
                                         f"one of {SCOPES}"))


def _ops_of(stage: Stage, sch: Schedule) -> set:
    return {id(op) for op, st in sch.stage_map.items() if st is stage}


def _copy_op(name: str, src: Tensor, axis_names: list[str]) -> ComputeOp:
    axis = tuple(IterVar(Var("int32", n, True), Range(0, e), "data_par")
                 for n, e in zip(axis_names, src.shape))
    body = TensorRead(src.dtype, src, tuple(iv.var for iv in axis))
    return ComputeOp(name=name, axis=axis, body=(body,))


def cache_read(sch: Schedule, tensor: Tensor, scope: str, readers) -> Tensor:
    """Create a stage that copies ``tensor`` into ``scope``; ``readers`` read the copy.

    Returns the cache tensor (``T.shared``); attach it with ``compute_at``.

    Raises
    ------
    ScheduleError
        For an unknown scope, a reader that does not read ``tensor``, or no readers.
    """
    _check_scope("cache_read", scope)
    src_stage = sch[tensor]
    # the tensor as the stage now holds it (an earlier cache_write replaced the op); for a
    # stage with several outputs, the output the user named
    src = src_stage.op.output(getattr(tensor, "value_index", 0))
    if not isinstance(readers, (list, tuple)):
        readers = [readers]
    if not readers:
        raise ScheduleError(format_error("cache_read", "no readers given",
                                         f"the stages that read {src.name!r}"))
    reader_stages = [sch[r] for r in readers]
    names = [iv.var.name for iv in src.op.axis] if isinstance(src.op, ComputeOp) else [
        f"ax{k}" for k in range(src.ndim)]
    cname = src.name if src.op.num_outputs == 1 else f"{src.name}.v{src.value_index}"
    # a second cache of the same tensor and scope (one per reader) gets its own name: a
    # schedule's trace names stages, and its replay (``Schedule.copy``) must tell them apart
    taken = {st.name for st in sch.stages}
    cache_name, k = f"{cname}.{scope}", 1
    while cache_name in taken:
        cache_name, k = f"{cname}.{scope}_{k}", k + 1
    cache = _copy_op(cache_name, src, names)
    old = _ops_of(src_stage, sch)
    for rs in reader_stages:
        if isinstance(rs.op, ScanOp):
            # its body reads its own earlier rows: rebuilt as a plain compute (as for the
            # other readers) it lost them (fuzz seed llvm 65727: wrong values)
            raise ScheduleError(format_error(
                "cache_read", f"reader {rs.name!r} is a te.scan, which reads its own earlier "
                f"rows", "readers that are compute stages",
                hint=f"read {src.name!r} through a compute stage that the scan reads, or "
                f"cache_read the scan's output for its consumers"))
        if not isinstance(rs.op, ComputeOp) or not any(
                id(t.op) in old and t.value_index == src.value_index
                for t in rs.op.input_tensors):
            raise ScheduleError(format_error(
                "cache_read", f"stage {rs.name!r} does not read {src.name!r}",
                "list stages that read the tensor as readers"))
        rt = _Retarget(old, cache.output(0), src.value_index)
        _replace_op(sch, rs, ComputeOp(name=rs.op.name, tag=rs.op.tag, attrs=rs.op.attrs,
                                       axis=rs.op.axis, reduce_axis=rs.op.reduce_axis,
                                       body=tuple(rt.visit(b) for b in rs.op.body)))
    st = sch._add_stage(cache, after=src_stage)
    st.scope, st.scope_primitive = scope, "cache_read"
    return cache.output(0)


def cache_write(sch: Schedule, tensor, scope: str):
    """Compute ``tensor`` into a cache in ``scope``; the original stage becomes a copy
    out of the cache (``C[i, j] = C.local[i, j]``).

    Returns the cache tensor; the original stage keeps its spatial axes (``C.op.axis``)
    and loses its reduction axes, which move to the cache stage
    (``s[C.local].op.reduce_axis``). A stage with several outputs is cached as a whole:
    pass the list of all its outputs (TVM's form), get the list of cache tensors.

    Raises
    ------
    ScheduleError
        For a placeholder, a scan, an unknown scope, a stage already transformed, or only
        some outputs of a multi-output stage.
    """
    _check_scope("cache_write", scope)
    several = isinstance(tensor, (list, tuple))
    tensors = list(tensor) if several else [tensor]
    if not tensors:
        raise ScheduleError(format_error("cache_write", "an empty list of tensors",
                                         "the tensor (or all outputs of one stage) to cache"))
    stage = sch[tensors[0]]
    op = stage.op
    if "te.extern" in op.attrs:
        raise ScheduleError(format_error("cache_write", f"{op.name!r} is a te.extern",
                                         "a compute stage (cache_read its consumers' input "
                                         "instead)"))
    if isinstance(op, PlaceholderOp):
        raise ScheduleError(format_error("cache_write", f"{op.name!r} is a placeholder",
                                         "cache the output of a compute"))
    if isinstance(op, ScanOp):
        raise ScheduleError(format_error(
            "cache_write", f"stage {op.name!r} is a te.scan, which reads its own earlier rows",
            "a compute stage", hint="cache_read the scan's output for its consumers"))
    ks = sorted({getattr(t, "value_index", 0) for t in tensors})
    if any(sch[t] is not stage for t in tensors) or ks != list(range(op.num_outputs)):
        raise ScheduleError(format_error(
            "cache_write", f"stage {op.name!r} has {op.num_outputs} outputs; got "
            f"{len(tensors)} tensor(s)", "every output of one stage, as a list "
            "(its outputs share one loop nest, so they are cached together)",
            hint=f"s.cache_write([{', '.join(f'{op.name}_{k}' for k in range(op.num_outputs))}]"
            f", {scope!r})"))
    attached = [st.name for st in sch.stages if st.attach_stage is stage]
    if stage.relations or stage.annotations or stage.attach_type != "root" or attached:
        what = (f"stages {attached} are computed at its loops" if attached
                else "it was already scheduled")
        raise ScheduleError(format_error(
            "cache_write", f"cannot cache stage {op.name!r}: {what}",
            "call cache_write before other primitives on the stage and before compute_at "
            "into it"))
    axis = tuple(IterVar(Var("int32", f"{iv.var.name}.c", True), iv.dom, "data_par")
                 for iv in op.axis)
    # the reduce axes move to the cache stage as they are (TVM does the same): the user's
    # ``C.op.reduce_axis[k]`` then names a loop of ``s[CC]``, which the copy stage no
    # longer has
    raxis = op.reduce_axis
    mapping = {a.var: b.var for a, b in zip(op.axis, axis)}
    sub = substituter(mapping)   # one walker: a node the bodies share stays shared
    bodies = tuple(sub.visit(b) for b in op.body)
    cache = ComputeOp(name=f"{op.name}.{scope}", tag=op.tag, attrs=op.attrs, axis=axis,
                      reduce_axis=raxis, body=bodies)
    copy = ComputeOp(name=op.name, tag=op.tag, attrs=op.attrs, axis=op.axis,
                     body=tuple(TensorRead(b.dtype, cache.output(k),
                                           tuple(iv.var for iv in op.axis))
                                for k, b in enumerate(bodies)))
    _replace_op(sch, stage, copy)
    stage.all_iter_vars = list(op.axis)
    stage.leaf_iter_vars = list(op.axis)
    cst = sch._add_stage(cache, before=stage)
    cst.scope, cst.scope_primitive = scope, "cache_write"
    return list(cache.outputs) if several else cache.output(0)


def _replace_op(sch: Schedule, stage: Stage, new_op: ComputeOp) -> None:
    if stage.op in sch.outputs:
        sch.outputs[sch.outputs.index(stage.op)] = new_op
    stage.op = new_op
    sch.stage_map[new_op] = stage
