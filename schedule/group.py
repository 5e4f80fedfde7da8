"""Stage groups (TVM's ``Schedule.create_group``): several stages attached as one.

A group holds the compute stages between some output tensors and some input tensors
(the outputs included, the inputs only with ``include_inputs``). ``g.compute_at(s[D],
axis)`` computes every member that is at the group's root inside that loop of ``D``, each
with the region its consumers need there; members attached to other members stay where
they are, and a member that later calls ``compute_root`` returns to the group's loop
(TVM's ``kGroupRoot``). A stage belongs to at most one group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from polytile.errors import fail, warn
from polytile.te.expr import IterVar
from polytile.te.tensor import PlaceholderOp, Tensor

from .relations import Step

if TYPE_CHECKING:
    from .schedule import Schedule
    from .stage import Stage


class Group:
    """A virtual stage standing for ``members`` (TVM's group stage). Use
    :meth:`compute_at` and :meth:`compute_root`; it has no loops of its own."""

    def __init__(self, sch: Schedule, members: list, name: str):
        self.schedule = sch
        self.members: list[Stage] = members
        self.name = name
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None

    def __repr__(self) -> str:
        return f"Group({self.name}: {', '.join(m.name for m in self.members)})"

    def _roots(self) -> list:
        """Members at the group's root: not inlined, not attached to another member."""
        inside = {id(m) for m in self.members}
        return [m for m in self.members if m.attach_type != "inline"
                and not (m.attach_type == "scope" and id(m.attach_stage) in inside)]

    def compute_at(self, parent, scope: IterVar) -> None:
        """Compute the group's root members inside loop ``scope`` of ``parent`` (see the
        module docstring), in producer-before-consumer order.

        Raises
        ------
        ScheduleError
            If ``parent`` is a member of the group, or for any member what
            ``Stage.compute_at`` raises (an output of the schedule, a loop ``parent``
            does not have, a parent that does not read the member).
        """
        sch = self.schedule
        parent = sch[parent] if not hasattr(parent, "leaf_iter_vars") else parent
        if any(parent is m for m in self.members):
            fail("compute_at", f"group {self.name!r} cannot be computed inside its member "
                 f"{parent.name!r}", "attach the group to a stage that reads its outputs")
        for m in self._roots():
            m.compute_at(parent, scope)
        self.attach_stage, self.attach_ivar = parent, scope

    def compute_root(self) -> None:
        """Compute the group's root members at the top level again."""
        self.attach_stage = self.attach_ivar = None
        for m in self._roots():
            m.compute_root()


def _members(sch: Schedule, outputs: list, inputs: list, include_inputs: bool) -> list:
    """The stages between ``outputs`` and ``inputs`` (TVM's ``GetSubGraph``), in schedule
    order; placeholders are left out (they have no loops)."""
    stop = {id(sch[t]) for t in inputs}
    found: dict = {}
    todo = [sch[t] for t in outputs]
    while todo:
        st = todo.pop()
        if id(st) in found:
            continue
        if id(st) in stop:
            if include_inputs:
                found[id(st)] = st
            continue
        found[id(st)] = st
        todo.extend(sch[t] for t in st.op.input_tensors)
    return [st for st in sch.stages if id(st) in found and not isinstance(st.op, PlaceholderOp)]


def create_group(sch: Schedule, outputs, inputs, include_inputs: bool = False) -> Group:
    """Group the stages between ``outputs`` and ``inputs``; see the module docstring.

    ``outputs`` and ``inputs`` are tensors or lists of them. A member attached to a stage
    outside the group is computed at root again, with a warning, as in TVM.

    Raises
    ------
    ScheduleError
        For a tensor that is not part of the schedule, no compute stage in the group, or
        a stage that already belongs to another group (nested groups are not supported).
    """
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs or [])
    if not outputs:
        fail("create_group", "no outputs given", "the tensors the group computes")
    members = _members(sch, outputs, inputs, include_inputs)
    if not members:
        fail("create_group", f"no compute stage lies between outputs "
             f"{[t.name for t in outputs]} and inputs {[t.name for t in inputs]}",
             "outputs that are computes of this schedule")
    for m in members:
        if m.group is not None:
            fail("create_group", f"stage {m.name!r} already belongs to group "
                 f"{m.group.name!r}; nested or overlapping groups are not supported",
                 "group disjoint sets of stages")
    names = [t.name for t in outputs]
    g = Group(sch, members, f"group({', '.join(names)})")
    inside = {id(m) for m in members}
    for m in members:
        m.group = g
        if m.attach_type == "scope" and id(m.attach_stage) not in inside:
            warn(f"create_group: stage {m.name!r} was computed at "
                 f"{m.attach_stage.name!r}.{m.attach_ivar.name!r}, outside the group; it is "
                 "computed at root again (as TVM does)")
            m.compute_root()
    sch.trace.append(Step("create_group", names[0], (tuple(names),
                                                     tuple(t.name for t in inputs),
                                                     bool(include_inputs))))
    return g


__all__ = ["Group", "create_group"]
