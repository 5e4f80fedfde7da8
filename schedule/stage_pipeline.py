"""Software pipelining of GPU shared-memory staging: ``Stage.pipeline`` and TVM's
``Stage.double_buffer`` (what they mean is :mod:`.passes.software_pipeline`)."""

from __future__ import annotations

import dataclasses

from polytile.errors import ScheduleError, fail

from .kinds import PipelinePragma, ThreadTag


class PipelineMixin:
    """``pipeline`` and ``double_buffer`` of a stage."""

    def pipeline(self, axis, stages: int = 2, *, mma_wait: int | None = None,
                 fragment_prefetch: bool = False, copy_after_wait: bool = False,
                 tma: bool = False, sync_copies: bool = False) -> None:
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

        ``copy_after_wait=True`` (with ``mma_wait``; the order of Triton's Hopper
        pipeliner): each iteration issues its MMAs first, then waits (``wgmma.wait_group
        N``), and after a second barrier (every thread's groups up to ``ko - N`` retired)
        copies tile ``ko + S - N`` into the slot group ``ko - N`` read: the copies run
        ``S - N`` iterations ahead, one more than above, for one more barrier per
        iteration (which the MMAs of ``ko`` overlap)::

            for ko in range(E):
              cp.async.wait_group(S - 1 - N); fence.proxy.async; sync
              wgmma.fence; compute(ko, S[ko % S]); wgmma.commit_group
              wgmma.wait_group(N); sync
              if ko + S - N < E: S[(ko + S - N) % S] = copy(ko + S - N)
              commit

        ``fragment_prefetch=True`` (a synchronous compute whose unrolled body loads
        register fragments from the shared buffers in several k steps, ``L0 M0 L1 M1 ...
        L(n-1) M(n-1)``, ``L`` reading the shared slots into thread-private buffers, ``M``
        computing from them): the barrier of the next iteration moves before the MMAs of
        the last k step, and the first step's fragments of the next tile are loaded right
        after it, into a second set of fragment registers (double buffering), so that the
        MMAs of the last step overlap those loads and the barrier::

            wait_group(S - 2); sync; S[..] = copy(S - 1); commit; L0(0)[F']
            for ko in range(E):
              M0(ko)[F']; L1(ko); M1(ko) ... L(n-1)(ko)
              wait_group(S - 2); sync
              if ko + S < E: S[(ko + S) % S] = copy(ko + S)
              commit
              if ko + 1 < E: L0(ko + 1)[F']
              M(n-1)(ko)
            wait_group(0)

        ``F'`` are copies of the fragment buffers ``L0`` writes, named ``<name>.next``
        (CUTLASS's warp-level fragment double buffering, ``MmaMultistage``). Where every
        step loads the same fragment tiles and their number ``n`` is even, the steps
        alternate between ``F'`` (even) and ``F`` (odd), each step's loads issued before
        the MMAs of the step before: ``L1 M0[F'] L2[F'] M1 ... L(n-1) M(n-2)[F']``, then
        the barrier, ``L0(k + 1)[F']`` and ``M(n-1)``. Refused
        (when lowering) for a compute with fewer than two k steps of loads (fragments per
        k tile), with ``mma_wait``, or where the last step still reads ``L0``'s fragments.

        ``tma=True`` (sm_90; :mod:`.passes.tma_copy`): each shared stage's tile is copied
        by one TMA bulk tensor copy (``cp.async.bulk.tensor.2d``, issued by the block's
        first thread, the tensor map of the global operand built at launch) that
        completes on an ``mbarrier`` of its slot (``arrive.expect_tx``), instead of the
        threads' 16-byte ``cp.async``; every thread waits on the slot's mbarrier
        (``try_wait.parity``) instead of ``cp.async.wait_group``. The barriers of the
        loop stay (they order the slot reuse). Refused when lowering, naming the stage and
        its copy, where a tile is not a TMA box: a 2-D cache_read tile of a function
        argument of constant shape, unguarded (the tiles divide the operand), rows of a
        multiple of 16 bytes, box sides of at most 256 elements, a dense shared tile
        (swizzled ``128B``/``64B``/``32B`` with rows of exactly that width, or unswizzled),
        the operand's row stride a multiple of 16 bytes.

        ``sync_copies=True`` (what :meth:`double_buffer` asks): a copy that cannot be a
        16-byte ``cp.async`` (not vectorized, misaligned) stays an ordinary copy instead of
        being refused. It completes when issued, so the slot order and barriers above
        stay right; the loop keeps TVM's double buffering (one buffer written while the
        other is read) without the asynchronous overlap.

        Synonyms: TVM TensorIR ``software_pipeline_stage``/``software_pipeline_order``
        annotations with ``software_pipeline_async_stages``, Triton ``num_stages``,
        CUTLASS multistage mainloops.

        Raises
        ------
        ScheduleError
            Here, for a loop that is not a serial loop of this stage, ``stages < 2``,
            ``mma_wait`` outside ``0..stages - 2``, ``copy_after_wait`` without
            ``mma_wait``, ``tma`` not a bool or with ``fragment_prefetch``;
            when lowering, naming the stage, the loop and ``pipeline``, when the loop's
            body does not fit (see Legality) or a copy cannot be a 16-byte ``cp.async``.
        """
        iv = self._leaf("pipeline", axis)
        if self._add_pipeline(iv, stages, mma_wait, fragment_prefetch, copy_after_wait, tma,
                              sync_copies):
            return
        # only the options given are recorded: traces written before an option existed
        # replay to the same pragma
        extra = {k: v for k, v in (("mma_wait", mma_wait), ("fragment_prefetch",
                                                             fragment_prefetch),
                                   ("copy_after_wait", copy_after_wait), ("tma", tma),
                                   ("sync_copies", sync_copies))
                 if v not in (None, False)}
        self._record("pipeline", iv, stages=stages, **extra)

    def _add_pipeline(self, iv, stages, mma_wait=None, fragment_prefetch=False,
                      copy_after_wait=False, tma=False, sync_copies=False,
                      via: tuple = ()) -> bool:
        """Check the options of :meth:`pipeline` of leaf loop ``iv`` and add its pragma
        (``via``: the stages whose ``double_buffer`` asks for it); True when the loop was
        already pipelined so (nothing new)."""
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
        if not isinstance(fragment_prefetch, bool) or (fragment_prefetch
                                                        and mma_wait is not None):
            fail("pipeline", f"fragment_prefetch={fragment_prefetch!r} for loop {iv.name!r} "
                 f"of stage {self.name!r} with mma_wait={mma_wait!r}", "a bool, and "
                 "fragment_prefetch only with a synchronous compute (no mma_wait)")
        if not isinstance(copy_after_wait, bool) or (copy_after_wait and mma_wait is None):
            fail("pipeline", f"copy_after_wait={copy_after_wait!r} for loop {iv.name!r} of "
                 f"stage {self.name!r} with mma_wait={mma_wait!r}", "a bool, and "
                 "copy_after_wait only with mma_wait (asynchronous MMA groups)",
                 hint="pipeline(..., mma_wait=1, copy_after_wait=True)")
        if not isinstance(sync_copies, bool):
            fail("pipeline", f"sync_copies={sync_copies!r} for loop {iv.name!r} of stage "
                 f"{self.name!r}", "a bool")
        if not isinstance(tma, bool) or (tma and fragment_prefetch):
            fail("pipeline", f"tma={tma!r} for loop {iv.name!r} of stage {self.name!r} "
                 f"with fragment_prefetch={fragment_prefetch!r}", "a bool, and tma "
                 "without fragment_prefetch (its tiles are waited for by mbarriers)")
        prs = self.pragmas.get(iv, ())
        old = [v for k, v in prs if k == "software_pipeline"]
        if old:
            if (old[0].stages, old[0].mma_wait, old[0].fragment_prefetch,
                    old[0].copy_after_wait, old[0].tma) == (stages, mma_wait,
                                                            fragment_prefetch,
                                                            copy_after_wait, tma):
                if via and not set(via) <= set(old[0].via):
                    new = dataclasses.replace(old[0], via=old[0].via + tuple(
                        v for v in via if v not in old[0].via))
                    self.pragmas[iv] = tuple((k, new if v is old[0] else v) for k, v in prs)
                return True
            fail("pipeline", f"loop {iv.name!r} of stage {self.name!r} is already "
                 f"pipelined with stages={old[0].stages}", "one depth per loop")
        prag = PipelinePragma(stages, self.name, iv.name, mma_wait, fragment_prefetch,
                              copy_after_wait, tma, sync_copies, tuple(via))
        self.pragmas[iv] = prs + (("software_pipeline", prag),)
        return False

    def double_buffer(self) -> None:
        """TVM's ``Stage.double_buffer``: this shared stage, computed at a loop of its
        consumer, gets two buffers, the copy of the next iteration overlapping the
        compute of this one: ``s[C].pipeline(loop, stages=2)`` on the loop it is attached
        at (which pipelines every shared stage attached there).

        Raises
        ------
        ScheduleError
            If the stage is not attached with ``compute_at`` yet, or as ``pipeline``
            (naming ``double_buffer`` and this stage, here and when lowering).
        """
        if self.attach_type != "scope" or self.attach_stage is None:
            fail("double_buffer", f"stage {self.name!r} is not computed at a loop of "
                 "another stage", "call s[S].compute_at(s[C], loop) first",
                 hint="double buffering pipelines the loop the copy is attached at")
        host, iv = self.attach_stage, self.attach_ivar
        try:
            # TVM's double buffer needs no vector copies: those that are none stay ordinary
            host._add_pipeline(iv, 2, sync_copies=True, via=(self.name,))
        except ScheduleError as exc:
            what = str(exc).removeprefix("pipeline: ")
            raise ScheduleError(f"double_buffer: stage {self.name!r}, computed at loop "
                                f"{iv.name!r} of stage {host.name!r} (double buffering "
                                f"pipelines that loop): {what}") from None
        self._record("double_buffer")
