"""Software prefetch: TVM's ``Stage.prefetch`` (what it means is
:mod:`.passes.prefetch`)."""

from __future__ import annotations

from polytile.errors import fail
from polytile.te.tensor import Tensor

from .kinds import PrefetchPragma


class PrefetchMixin:
    """``prefetch`` of a stage."""

    def prefetch(self, tensor, var, offset: int = 1) -> None:
        """Prefetch, at the start of each iteration of loop ``var`` of this stage, the cache
        lines of ``tensor`` that iteration ``var + offset`` reads or writes (TVM's
        ``Stage.prefetch(tensor, var, offset)``).

        The prefetched region is the footprint of the stage's accesses to ``tensor`` nested
        in ``var``: for each access, its index at ``var + offset`` over the loops inside
        ``var`` (a contiguous run of elements is one prefetch per 64-byte line). A write
        prefetches for writing (x86 ``prefetchw``), a read for reading (``prefetcht0``).

        *Rewrite* (``s[C].prefetch(C, i1, 1)`` on a 12 x 32 register tile of ``C``)::

            for i1 in range(E):                for i1 in range(E):
              for k in range(K):         ->      prefetch(&C[12 * (i1 + 1) + r, j]) for the
                C[12 * i1 + r, j] += ...             12 rows r, one per 64-byte line of j
                                                 for k in range(K):
                                                   C[12 * i1 + r, j] += ...

        What it helps: an access the hardware prefetchers cannot predict whose latency is
        not hidden, such as the ``C`` tile a GEMM micro-kernel loads from 12 rows at a
        large stride (12 pages) before its k loop: issued one tile ahead, the lines arrive
        while the current tile runs. It costs one instruction per line and can evict data
        still in use when the region is large. Prefetching never faults, so the lines past
        the last iteration are harmless.

        A hint: the ``llvm`` target honours it; other targets ignore it. Accesses whose
        index is not affine in the loops inside ``var`` (constant strides, constant
        extents) are not prefetched.

        Parameters
        ----------
        tensor : Tensor or str
            A tensor this stage reads or writes (its own output for the accumulator of a
            reduction), or its name (as a trace records it).
        var : IterVar
            A current loop of this stage.
        offset : int
            How many iterations ahead (``1``: the next one); not zero.

        Raises
        ------
        ScheduleError
            Here, for a tensor the stage does not access, a zero or non-int offset, or a
            loop that is not a current loop of this stage; when building, naming the stage,
            loop and tensor, for a footprint of more than
            :data:`~polytile.schedule.passes.prefetch.MAX_LINES` lines per iteration.
        """
        iv = self._leaf("prefetch", var)
        name = tensor.op.name if isinstance(tensor, Tensor) else tensor
        if not isinstance(name, str):
            fail("prefetch", f"tensor {tensor!r} of stage {self.name!r} is not a tensor",
                 "a Tensor (or its name) that the stage reads or writes")
        touched = [t.op.name for t in self.op.input_tensors] + [self.op.name]
        if name not in touched:
            fail("prefetch", f"stage {self.name!r} does not access tensor {name!r}",
                 f"one of {sorted(set(touched))}",
                 hint="prefetch a tensor in the stage that reads it")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset == 0:
            fail("prefetch", f"offset={offset!r} for loop {iv.name!r} of stage "
                 f"{self.name!r}", "a non-zero int (1: the next iteration)")
        prag = PrefetchPragma(name, offset, self.name, iv.name)
        if ("prefetch", prag) in self.pragmas.get(iv, ()):
            return
        self.pragmas[iv] = self.pragmas.get(iv, ()) + (("prefetch", prag),)
        self._record("prefetch", name, iv, offset)
