"""Schedules: *how* to compute, and their lowering to loop IR.

``create_schedule`` makes one :class:`Stage` per operation; primitives on stages (split,
tile, fuse, reorder, vectorize, unroll, parallel, pragma, compute_at, compute_inline,
compute_root, tensorize) transform its loops; ``lower`` produces the loop IR through the
phases of :mod:`polytile.schedule.pipeline`.
"""

from __future__ import annotations

from .iter_attrs import IterVarAttr
from .iter_attrs import IterVarKinds as IterVar
from .pipeline import lower
from .relations import Fuse, Singleton, Split, Step, Transform
from .schedule import Schedule, create_schedule, replay
from .stage import Stage, thread_axis

# ``IterVar`` here is TVM's ``tvm.te.schedule.IterVar`` namespace of kind numbers (for
# ``iter_var_attrs[...].iter_type``); the axis class itself is ``polytile.te.IterVar``
__all__ = ["Fuse", "IterVar", "IterVarAttr", "Schedule", "Singleton", "Split", "Stage", "Step",
           "Transform", "create_schedule", "lower", "replay", "thread_axis"]
