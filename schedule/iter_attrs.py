"""TVM's read-only view of a stage's loop annotations: ``Stage.iter_var_attrs``.

``s[T].iter_var_attrs[xi]`` (TVM's ``IterVarAttr``) says what a loop was annotated with:
``iter_type`` is one of TVM's ``IterVar`` kind numbers (``IterVar.Unrolled``,
``IterVar.Vectorized``, ``IterVar.Parallelized``, ``IterVar.Tensorized``, ``IterVar.DataPar``
for a plain loop), ``bind_thread`` the thread axis a loop is bound to, ``pragma_keys`` and
``pragma_values`` its pragmas, ``tensor_intrin`` its tensor intrinsic. Only loops with an
annotation have an entry, as in TVM. The annotations themselves live in the stage
(``annotations``, ``pragmas``, ``tensorized``); this is a view computed on each access.
"""

from __future__ import annotations

from dataclasses import dataclass

from polytile.te.expr import IterVar

from .kinds import LoopKind, ThreadTag

#: TVM's ``IterVar`` kind numbers (``tvm.te.schedule.IterVar.Unrolled`` ...)
DATA_PAR, THREAD_INDEX, COMM_REDUCE, ORDERED, DIM_INFO = 0, 1, 2, 3, 4
UNROLLED, VECTORIZED, PARALLELIZED, TENSORIZED = 5, 6, 7, 8

_KIND = {LoopKind.UNROLLED: UNROLLED, LoopKind.VECTORIZED: VECTORIZED,
         LoopKind.PARALLEL: PARALLELIZED}


class PragmaKey(str):
    """A pragma name; ``.value`` is the string (TVM gives ``StringImm`` objects)."""

    @property
    def value(self) -> str:
        return str(self)


@dataclass(frozen=True)
class IterVarAttr:
    """The annotations of one loop (TVM's ``IterVarAttr``); see the module docstring."""

    iter_type: int
    bind_thread: IterVar | None = None
    pragma_keys: tuple = ()
    pragma_values: tuple = ()
    tensor_intrin: object = None


def iter_var_attrs(stage) -> dict:
    """``{IterVar: IterVarAttr}`` of the annotated loops of ``stage``."""
    out: dict = {}
    loops = list(stage.annotations) + [iv for iv in stage.pragmas if iv not in
                                       stage.annotations]
    if stage.tensorized is not None and stage.tensorized[0] not in loops:
        loops.append(stage.tensorized[0])
    for iv in loops:
        ann = stage.annotations.get(iv)
        kind = _KIND.get(ann, THREAD_INDEX if isinstance(ann, ThreadTag) else DATA_PAR)
        thread = stage.bound_axes.get(iv) if isinstance(ann, ThreadTag) else None
        intrin = None
        if stage.tensorized is not None and stage.tensorized[0] is iv:
            kind, intrin = TENSORIZED, stage.tensorized[1]
        prs = stage.pragmas.get(iv, ())
        out[iv] = IterVarAttr(kind, thread, tuple(PragmaKey(k) for k, _ in prs),
                              tuple(v for _, v in prs), intrin)
    return out


class IterVarKinds:
    """TVM's ``tvm.te.schedule.IterVar`` constants, for ``iter_var_attrs[...].iter_type``."""

    DataPar, ThreadIndex, CommReduce, Ordered, DimInfo = (DATA_PAR, THREAD_INDEX,
                                                         COMM_REDUCE, ORDERED, DIM_INFO)
    Unrolled, Vectorized, Parallelized, Tensorized = (UNROLLED, VECTORIZED, PARALLELIZED,
                                                      TENSORIZED)


__all__ = ["IterVarAttr", "IterVarKinds", "iter_var_attrs"]
