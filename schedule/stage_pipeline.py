"""Software pipelining of GPU shared-memory staging: ``Stage.pipeline`` and TVM's
``Stage.double_buffer`` (what they mean is :mod:`.passes.software_pipeline`)."""

from __future__ import annotations

from polytile.errors import fail

from .kinds import PipelinePragma, ThreadTag


class PipelineMixin:
    """``pipeline`` and ``double_buffer`` of a stage."""

    def pipeline(self, axis, stages: int = 2, *, mma_wait: int | None = None) -> None:
        """Run loop ``axis`` of this stage as a software pipeline ``stages`` deep: the
        stages computed at ``axis`` in ``shared`` memory (``cache_read`` copies attached
        with ``compute_at(s[C], axis)``) get ``stages`` buffers each, and the copies of
        iteration ``k + stages - 1`` are issued before the compute of iteration ``k``, as
        asynchronous copies (PTX ``cp.async``) that the compute waits for with
        ``cp.async.wait_group`` and one barrier per iteration.

        *Rewrite* (``stages=3``, ``ko`` of extent ``E``; ``S[.]`` the shared buffer, its
        new leading dimension the slot)::

            for ko in range(E):                 sync
              sync                              S[0] = copy(0); commit
              S = copy(ko)             ->       S[1] = copy(1); commit      (if 1 < E)
              sync                              for ko in range(E):
              compute(ko, S)                      wait_group(1); sync
                                                  if ko + 2 < E: S[(ko + 2) % 3] = copy(ko + 2)
                                                  commit
                                                  compute(ko, S[ko % 3])
                                                wait_group(0)

        The copies must be vectorized loops of 16 bytes (8 float16 or 4 float32 lanes,
        ``s[S].vectorize``) whose global and shared addresses are provably multiples of 16
        bytes (row lengths multiples of the vector; ``storage_align`` rows padded by a
        multiple of 8 float16). On GPUs before sm_80, ``cp.async`` is an ordinary copy
        (still correct: the slots keep iterations apart). Shared memory grows ``stages``
        times; kernels above 48 KiB use dynamic shared memory (up to the device's opt-in
        limit, 227 KiB on sm_90).

        Legality (checked when lowering): the body of ``axis`` is, after an optional
        barrier, the shared copies (reading memory the loop does not write), a barrier,
        then the compute, which does not write the copied buffers; the buffers are not
        used outside the loop.

        ``mma_wait=N`` (for a compute tensorized with an asynchronous intrinsic,
        ``te.AsyncGroup``, such as ``wgmma_mma(..., asynchronous=True)``): each
        iteration's intrinsic calls form one group (``wgmma.fence`` before them,
        ``wgmma.commit_group`` after) and the iteration ends with ``wgmma.wait_group N``,
        so the MMAs of iteration ``k`` run while iteration ``k + 1`` waits for its tile and
        issues its own. The ``N`` groups in flight still read their slots, so the copies run
        ``stages - 1 - N`` iterations ahead (not ``stages - 1``), waited for with
        ``cp.async.wait_group(stages - 2 - N)``; ``0 <= N <= stages - 2``::

            for ko in range(E):
              cp.async.wait_group(S - 2 - N); fence.proxy.async; sync
              if ko + S - 1 - N < E: S[(ko + S - 1 - N) % S] = copy(ko + S - 1 - N)
              commit
              wgmma.fence; compute(ko, S[ko % S]); wgmma.commit_group
              wgmma.wait_group(N)
            wgmma.wait_group(0); cp.async.wait_group(0)

        Synonyms: TVM TensorIR ``software_pipeline_stage``/``software_pipeline_order``
        annotations with ``software_pipeline_async_stages``, Triton ``num_stages``,
        CUTLASS multistage mainloops.

        Raises
        ------
        ScheduleError
            Here, for a loop that is not a serial loop of this stage, ``stages < 2`` or
            ``mma_wait`` outside ``0..stages - 2``;
            when lowering, naming the stage, the loop and ``pipeline``, when the loop's
            body does not fit (see Legality) or a copy cannot be a 16-byte ``cp.async``.
        """
        iv = self._leaf("pipeline", axis)
        if isinstance(stages, bool) or not isinstance(stages, int) or stages < 2:
            fail("pipeline", f"stages={stages!r} for loop {iv.name!r} of stage "
                 f"{self.name!r}", "an int >= 2 (2 is double buffering)")
        if iv in self.annotations:
            a = self.annotations[iv]
            how = "bound to" if isinstance(a, ThreadTag) else "annotated"
            fail("pipeline", f"loop {iv.name!r} of stage {self.name!r} is {how} {str(a)!r}",
                 "a serial loop (not bound, vectorized, unrolled or parallel)")
        if mma_wait is not None and (isinstance(mma_wait, bool) or not isinstance(
                mma_wait, int) or not 0 <= mma_wait <= stages - 2):
            fail("pipeline", f"mma_wait={mma_wait!r} for loop {iv.name!r} of stage "
                 f"{self.name!r} with stages={stages}", f"an int in 0..{stages - 2} (the "
                 "MMA groups in flight hold slots: stages - 1 - mma_wait tiles are loaded "
                 "ahead, at least one)", hint="stages >= mma_wait + 2")
        old = [v for k, v in self.pragmas.get(iv, ()) if k == "software_pipeline"]
        if old:
            if (old[0].stages, old[0].mma_wait) == (stages, mma_wait):
                return
            fail("pipeline", f"loop {iv.name!r} of stage {self.name!r} is already "
                 f"pipelined with stages={old[0].stages}", "one depth per loop")
        prag = PipelinePragma(stages, self.name, iv.name, mma_wait)
        self.pragmas[iv] = self.pragmas.get(iv, ()) + (("software_pipeline", prag),)
        if mma_wait is None:
            self._record("pipeline", iv, stages=stages)
        else:
            self._record("pipeline", iv, stages=stages, mma_wait=mma_wait)

    def double_buffer(self) -> None:
        """TVM's ``Stage.double_buffer``: this shared stage, computed at a loop of its
        consumer, gets two buffers, the copy of the next iteration overlapping the
        compute of this one: ``s[C].pipeline(loop, stages=2)`` on the loop it is attached
        at (which pipelines every shared stage attached there).

        Raises
        ------
        ScheduleError
            If the stage is not attached with ``compute_at`` yet, or as ``pipeline``.
        """
        if self.attach_type != "scope" or self.attach_stage is None:
            fail("double_buffer", f"stage {self.name!r} is not computed at a loop of "
                 "another stage", "call s[S].compute_at(s[C], loop) first",
                 hint="double buffering pipelines the loop the copy is attached at")
        self.attach_stage.pipeline(self.attach_ivar, stages=2)
