"""Schedules: *how* to compute, and their lowering to loop IR.

``create_schedule`` makes one :class:`Stage` per operation; primitives on stages (split,
tile, fuse, reorder, vectorize, unroll, parallel, pragma, compute_at, compute_inline,
compute_root, tensorize) transform its loops; ``lower`` produces the loop IR through the
phases of :mod:`polytile.schedule.pipeline`.
"""

from __future__ import annotations

from .pipeline import lower
from .relations import Fuse, Singleton, Split, Step
from .schedule import Schedule, create_schedule, replay
from .stage import Stage, thread_axis

__all__ = ["Fuse", "Schedule", "Split", "Stage", "Step", "create_schedule", "lower", "replay",
           "thread_axis"]
