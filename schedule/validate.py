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
        computed inside it, or a loop without iterations is bound to a GPU index.
    """
    for st in sch.stages:
        if not isinstance(st.op, ComputeOp) or st.attach_type == "inline":
            continue
        leaves = st.leaf_iter_vars
        for iv, kind in st.annotations.items():
            if (kind.startswith("bind:") and kind != "bind:vthread"
                    and st.extent_of(iv) == 0):
                raise ScheduleError(format_error(
                    "bind", f"loop {iv.name!r} of stage {st.name!r} has no iterations (an "
                    f"empty reduce range or dimension) and is bound to {kind[5:]!r}",
                    "a GPU launch needs at least one block and one thread per index",
                    hint="leave the empty loop unbound (a reduction over it yields its "
                    "initial value)"))
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


def check_vector_extents(model) -> None:
    """Vectorized loops must have at most ``MAX_VECTOR_LANES`` iterations (their real
    extents, known once the regions of attached stages are).

    Raises
    ------
    ScheduleError
        Naming the loop, its stage and extent, with a hint to split it.
    """
    from .stage import MAX_VECTOR_LANES

    for node in model.loops.values():
        if node.annotation != "vectorize":
            continue
        ext = node.plan.extent(node.iter_var)
        if ext > MAX_VECTOR_LANES:
            raise ScheduleError(format_error(
                "vectorize", f"loop {node.iter_var.name!r} of stage {node.plan.name!r} has "
                f"extent {ext}", f"at most {MAX_VECTOR_LANES} lanes",
                hint=f"split it first: s[{node.plan.name}].split({node.iter_var.name}, "
                     f"factor=16)"))
