"""The schedule of a whole computation: one stage per operation, and the trace."""

from __future__ import annotations

from polytile.errors import ScheduleError, fail, format_error
from polytile.te.depth import deep
from polytile.te.expr import IterVar
from polytile.te.tensor import Operation, Tensor
from polytile.te.scan import ScanOp

from .cache import cache_read, cache_write
from .group import create_group
from .relations import Step
from .rfactor import rfactor, stage_of
from .stage import Stage, thread_axis


def _post_order(outputs: list[Operation]) -> list[Operation]:
    order: list[Operation] = []
    seen: set[int] = set()

    def visit(op: Operation):
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    for op in outputs:
        visit(op)
    return order


def _with_scan_states(outputs: list[Operation]) -> list[Operation]:
    """``outputs`` plus the other states of every ``te.scan`` one of whose states is among
    them. TVM's states are the outputs of one ``ScanOp``, so its scan tutorial's
    ``create_schedule(s_scan1.op)`` schedules ``s_scan2`` too; here a state narrower than the
    scan's loop nest is a compute of its own (``{name}.state{k}``)."""
    out = list(outputs)
    for op in _post_order(outputs):
        if not isinstance(op, ScanOp):
            continue
        states = [t.op for t in op.results]
        if any(o is s for o in out for s in [op, *states]):
            out += [s for s in states if not any(s is o for o in out)]
    return out


class ScanStep:
    """``s[t]`` of a compute between a ``te.scan``'s update and its state (TVM's
    multi-stage scan cell, ``s_update1`` read by ``s_update2``): it is inlined into the
    scan's step, so each of its values is computed where the update uses it. TVM's
    ``s[s_update1].compute_at(s[s_update2], xo)`` is accepted and changes nothing (the
    values are already computed inside that loop); ``compute_inline`` likewise. Any other
    primitive is refused: the stage has no loops of its own."""

    def __init__(self, op, scan_stage):
        self.op, self.scan = op, scan_stage
        self.name = op.name

    def compute_at(self, parent, scope) -> None:
        """Accepted for a loop of the scan's stage; the values stay inlined."""
        if parent is not self.scan:
            fail("compute_at", f"stage {self.name!r} is computed inside the step of te.scan "
                 f"{self.scan.name!r}", f"compute_at a loop of s[{self.scan.name}] (or of "
                 "its update), where it already is")
        parent._leaf("compute_at", scope, role="scope")

    def compute_inline(self) -> None:
        """Accepted: the stage is inlined into the scan's step already."""

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        fail(name, f"stage {self.name!r} is inlined into the step of te.scan "
             f"{self.scan.name!r} and has no loops of its own", "schedule the scan "
             f"through s[{self.scan.name}] (its update's axes)")

    def __repr__(self) -> str:
        return f"ScanStep({self.name!r} in {self.scan.name!r})"


class Schedule:
    """Stages of all operations reachable from ``outputs``, producers before consumers.

    ``s[T]`` (a tensor or operation) gives its :class:`Stage`. ``s.trace`` lists every
    primitive applied, as :class:`Step` records; :meth:`copy` replays it.
    """

    def __init__(self, outputs: list[Operation]):
        outputs = _with_scan_states(list(outputs))
        self.outputs = list(outputs)
        self._roots = list(outputs)   # before any op swap (cache_write, rfactor): for copy()
        self.stages: list[Stage] = []
        self.stage_map: dict[Operation, Stage] = {}
        self.trace: list[Step] = []
        self.groups: list = []
        for op in _post_order(self.outputs):
            st = Stage(op, self)
            self.stages.append(st)
            self.stage_map[op] = st
        for st in list(self.stages):
            if isinstance(st.op, ScanOp):
                # TVM schedules a scan through its update (s[s_update]), whose axes the
                # scan's stage shares; the update itself is inlined into the scan
                for u in st.op.update:
                    self.stage_map.setdefault(u.op, st)
                for op in st.op.steps:
                    self.stage_map.setdefault(op, ScanStep(op, st))

    def __getitem__(self, key) -> Stage:
        from polytile.te.vector import unwrap

        key = unwrap(key)   # a vector-dtype tensor: the stage of its lanes view
        op = key.op if isinstance(key, Tensor) else key
        if isinstance(key, ScanStep) and key.scan.schedule is self:
            return key
        if isinstance(key, Stage) and key.schedule is self:
            return key
        st = self.stage_map.get(op) if isinstance(op, Operation) else None
        if st is None and not isinstance(key, (Tensor, Operation, Stage)):
            raise TypeError(format_error(
                "schedule", f"s[...] got the {type(key).__name__} {key!r}",
                "expected a tensor or an operation of the computation",
                hint="index with the tensor itself, e.g. s[C]"))
        if st is None:
            name = getattr(key, "name", repr(key))
            raise ScheduleError(format_error(
                "schedule", f"{name!r} is not part of this schedule",
                "index the schedule with a tensor reachable from its outputs"))
        return st

    def _owner_of(self, iv: IterVar) -> Stage | None:
        for st in self.stages:
            if any(v is iv for v in st.all_iter_vars):
                return st
        return None

    def _reads_transitively(self, consumer: Operation, producer: Operation) -> bool:
        target = self.stage_map.get(producer)
        todo, seen = [self.stage_map[consumer]], set()
        while todo:
            st = todo.pop()
            for t in st.op.input_tensors:
                src = self.stage_map.get(t.op)
                if src is target:
                    return True
                if src is not None and id(src) not in seen:
                    seen.add(id(src))
                    todo.append(src)
        return False

    def _add_stage(self, op: Operation, *, after: Stage | None = None,
                   before: Stage | None = None) -> Stage:
        st = Stage(op, self)
        pos = self.stages.index(after) + 1 if after is not None else self.stages.index(before)
        self.stages.insert(pos, st)
        self.stage_map[op] = st
        return st

    @deep("cache_read")
    def cache_read(self, tensor: Tensor, scope: str, readers) -> Tensor:
        """Copy ``tensor`` into ``scope`` ("shared", "local" or "global") for ``readers``;
        see :func:`polytile.schedule.cache.cache_read`."""
        names = [self[r].name for r in (readers if isinstance(readers, (list, tuple))
                                        else [readers])]
        out = cache_read(self, tensor, scope, readers)
        k = getattr(tensor, "value_index", 0)   # an output of a multi-output stage
        self.trace.append(Step("cache_read", self[tensor].name, (scope, tuple(names)),
                               (("value_index", k),) if k else ()))
        return out

    @deep("rfactor")
    def rfactor(self, tensor: Tensor, axis: IterVar, factor_axis: int = 0):
        """Factor the reduction of ``tensor`` over its reduce loop ``axis`` into partial
        reductions; see :func:`polytile.schedule.rfactor.rfactor`. Returns the partial
        tensor, or the list of them of a tuple reduction (TVM's rule)."""
        st = stage_of(self, tensor)
        iv = ("iv", st._index_of(axis), axis.name) if isinstance(axis, IterVar) else axis
        out = rfactor(self, tensor, axis, factor_axis)
        self.trace.append(Step("rfactor", st.name, (iv, factor_axis)))
        return out

    @deep("cache_write")
    def cache_write(self, tensor, scope: str):
        """Compute ``tensor`` (or the list of all outputs of one stage) into a cache in
        ``scope``; see :func:`polytile.schedule.cache.cache_write`."""
        several = isinstance(tensor, (list, tuple))
        out = cache_write(self, tensor, scope)
        name = self[tensor[0] if several else tensor].name
        self.trace.append(Step("cache_write", name, (scope,),
                               (("all_outputs", True),) if several else ()))
        return out

    def create_group(self, outputs, inputs, include_inputs: bool = False):
        """Group the stages between ``outputs`` and ``inputs`` into one virtual stage that
        ``compute_at`` moves as a whole (TVM's ``Schedule.create_group``); see
        :mod:`polytile.schedule.group`.

        Returns
        -------
        Group
            With ``compute_at(parent, axis)`` and ``compute_root()``.
        """
        g = create_group(self, outputs, inputs, include_inputs)
        self.groups.append(g)
        return g

    def normalize(self) -> Schedule:
        """TVM's ``Schedule.normalize()`` (loops rebased to start at 0, inlined stages
        substituted, before TVM's bound inference): ``lower`` does both itself, so this
        returns the schedule unchanged."""
        return self

    def copy(self) -> Schedule:
        """A new schedule of the same operations with the trace replayed."""
        return replay(self.trace, create_schedule(self._roots))

    def __repr__(self) -> str:
        return "Schedule(\n" + "\n".join(f"  {s}" for s in self.trace) + "\n)"


def create_schedule(ops) -> Schedule:
    """Create the default schedule of ``ops`` (an operation, a tensor, or a list of them).

    Every stage starts at the root with its loops in axis order, reduce axes innermost.

    Raises
    ------
    TypeError
        If ``ops`` holds anything but operations or tensors.
    """
    if not isinstance(ops, (list, tuple)):
        ops = [ops]
    out = []
    for o in ops:
        if isinstance(o, Tensor):
            o = o.op
        if not isinstance(o, Operation):
            raise TypeError(format_error("create_schedule", f"got {type(o).__name__} {o!r}",
                                         "expected operations or tensors (C.op or C)"))
        out.append(o)
    if not out:
        raise TypeError(format_error("create_schedule", "no operations given",
                                     "expected the output operations, e.g. C.op"))
    return Schedule(out)


def replay(trace: list[Step], sch: Schedule) -> Schedule:
    """Apply the steps of ``trace`` to ``sch`` (a fresh schedule of the same computation).

    Raises
    ------
    ScheduleError
        If a step names a stage or axis that does not exist in ``sch``.
    """
    by_name = {}
    for st in sch.stages:
        by_name.setdefault(st.name, st)

    def stage(name: str) -> Stage:
        if name not in by_name:
            raise ScheduleError(format_error("replay", f"no stage named {name!r}",
                                             f"one of {sorted(by_name)}"))
        return by_name[name]

    def dec(st: Stage, a):
        if isinstance(a, tuple) and a and a[0] == "iv":
            _, k, name = a
            if not 0 <= k < len(st.all_iter_vars) or st.all_iter_vars[k].name != name:
                raise ScheduleError(format_error(
                    "replay", f"stage {st.name!r} has no iter_var {name!r} at position {k}",
                    "a trace recorded on the same computation"))
            return st.all_iter_vars[k]
        if isinstance(a, tuple) and a and a[0] == "stage":
            return stage(a[1])
        if isinstance(a, tuple) and a and a[0] == "thread":
            return thread_axis(a[1], name=a[2])
        if isinstance(a, tuple) and a and a[0] in ("predicate", "index_map"):
            return a[1]
        if isinstance(a, tuple):
            return tuple(dec(st, x) for x in a)
        return a

    for step in trace:
        st = stage(step.stage)
        args = list(step.args)
        if step.primitive == "cache_read":
            t = sch.cache_read(st.op.output(dict(step.kwargs).get("value_index", 0)), args[0],
                               [stage(n).op for n in args[1]])
            by_name.setdefault(t.op.name, sch[t])
            continue
        if step.primitive == "rfactor":
            t = sch.rfactor(st.op.output(0), dec(st, args[0]), args[1])
            t = t[0] if isinstance(t, list) else t     # a tuple reduction's partials
            by_name.setdefault(t.op.name, sch[t])
            continue
        if step.primitive == "cache_write":
            t = sch.cache_write(list(st.op.outputs) if dict(step.kwargs).get("all_outputs")
                                else st.op.output(0), args[0])
            t = t[0] if isinstance(t, list) else t
            by_name.setdefault(t.op.name, sch[t])
            continue
        if step.primitive == "create_group":
            outs, ins, include = args
            sch.create_group([stage(n).op.output(0) for n in outs],
                             [stage(n).op.output(0) for n in ins], include)
            continue
        if step.primitive == "compute_at":
            parent = stage(args[0][1])
            st.compute_at(parent, dec(parent, args[1]))
            continue
        fn = getattr(st, step.primitive, None)
        if fn is None:
            raise ScheduleError(format_error("replay", f"unknown primitive {step.primitive!r}"))
        fn(*[dec(st, a) for a in args], **{k: dec(st, v) for k, v in step.kwargs})
    return sch
