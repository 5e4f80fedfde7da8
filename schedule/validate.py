"""Schedule checks that need the whole schedule but no isl: run first by ``lower``."""

from __future__ import annotations

from polytile.errors import ScheduleError, format_error
from polytile.te.tensor import ComputeOp

from .schedule import Schedule


def validate_schedule(sch: Schedule) -> None:
    """Check annotations that constrain the loop structure.

    Raises
    ------
    ScheduleError
        When a vectorized loop is not the innermost loop of its stage or has a stage
        computed inside it.
    """
    for st in sch.stages:
        if not isinstance(st.op, ComputeOp) or st.attach_type == "inline":
            continue
        leaves = st.leaf_iter_vars
        for iv, kind in st.annotations.items():
            if kind != "vectorize":
                continue
            pos = leaves.index(iv)
            inner = leaves[pos + 1:]
            if inner:
                raise ScheduleError(format_error(
                    "vectorize", f"loop {iv.name!r} of stage {st.name!r} is not innermost",
                    "only the innermost loop can run as vector lanes",
                    Loops_inside=", ".join(v.name for v in inner),
                    hint=f"reorder so that {iv.name!r} comes last"))
            for other in sch.stages:
                if other.attach_stage is st and other.attach_ivar is iv:
                    raise ScheduleError(format_error(
                        "vectorize", f"stage {other.name!r} is computed at the vectorized "
                        f"loop {iv.name!r} of stage {st.name!r}",
                        "attach it at an outer loop"))

