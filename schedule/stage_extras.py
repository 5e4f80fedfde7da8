"""Stage primitives about storage rather than loops: ``set_scope``, ``set_store_predicate``
and ``transform_layout`` (TVM v0.19 names and semantics).

:class:`StorageMixin` is a base class of :class:`~polytile.schedule.stage.Stage`; the state
it sets (``scope``, ``store_predicate``, ``layouts``) is read by lowering: the attach
module (scopes), the AST converter (store guards) and the model (layouts, see
:mod:`polytile.schedule.layout`).
"""

from __future__ import annotations

from polytile.errors import fail
from polytile.te.expr import Const, Var, convert
from polytile.te.visitor import free_vars

from .kinds import ThreadTag

#: Storage scopes a stage's buffer can have (``cache_read``/``cache_write``/``set_scope``).
SCOPES = ("global", "shared", "local")


class StorageMixin:
    """``set_scope``, ``set_store_predicate`` and ``transform_layout`` of a stage."""

    def set_scope(self, scope: str) -> None:
        """Set the storage scope of this stage's buffer (TVM's ``Stage.set_scope``).

        ``"global"``: device (or host) memory; ``"shared"``: one copy per GPU block
        (CUDA ``__shared__``); ``"local"``: one copy per GPU thread (registers). Without
        a scope, a stage computed inside a thread loop is ``local``, inside a block loop
        ``shared``, else ``global`` (TVM's default). The scope matters for stages
        computed at a loop of a GPU kernel; a stage computed at root has its own buffer
        in global memory whatever its scope, and on CPUs every scope is ordinary memory.

        Refused when lowering (``ScheduleError``) where a scope cannot hold what the
        schedule computes exactly: ``global`` for a stage computed inside loops bound to
        GPU indices (every block and thread would share the one buffer), ``local`` for a
        stage whose own loops are bound to GPU indices (each thread would compute only
        part of the region its private copy must hold).

        Raises
        ------
        ScheduleError
            For an unknown scope, a placeholder or an output of the schedule (a function
            argument lives in global memory).
        """
        self._require_compute("set_scope")
        if scope not in SCOPES:
            fail("set_scope", f"unknown scope {scope!r} for stage {self.name!r}",
                 f"expected one of {', '.join(SCOPES)}")
        if self.op in self.schedule.outputs:
            fail("set_scope", f"stage {self.name!r} is an output of the schedule (a "
                 "function argument, in global memory)", "set the scope of intermediate "
                 "stages", hint=f"cache its computation: s.cache_write({self.name}, "
                 f"{scope!r})")
        self.scope, self.scope_primitive = scope, "set_scope"
        self._record("set_scope", scope)

    def set_store_predicate(self, predicate) -> None:
        """Store this stage's results only where ``predicate`` holds (TVM's
        ``Stage.set_store_predicate``), to skip the duplicate stores of GPU threads that
        all compute the same values: ``s[B].set_store_predicate(tx.var.equal(0))``, or
        ``tx.var == 0``.

        ``predicate`` is a condition on thread indices (``te.thread_axis`` variables,
        affine: comparisons, ``&``, ``|``, ``~``) that this stage's own loops do not
        bind: every element is still computed by some thread that stores it, so the
        results are the compute definition's. Checked when lowering, with the launch
        shape: the condition must hold for some thread of the block (else nothing would
        be stored), the stage must not bind those indices itself, must run on a GPU, and
        when computed at a loop must use ``shared`` memory (a ``local`` copy skipped by a
        thread would be read by that thread).

        Raises
        ------
        ScheduleError
            For a predicate that is not a boolean, reads anything but thread indices and
            constants (an axis of the stage: elements would be left unwritten), or is not
            affine.
        """
        self._require_compute("set_store_predicate")
        if isinstance(predicate, (bool, int)) and not isinstance(predicate, Const):
            predicate = Const("bool", bool(predicate))
        try:
            e = convert(predicate)
        except TypeError:
            fail("set_store_predicate", f"the predicate of stage {self.name!r} is "
                 f"{predicate!r}", "expected a boolean expression on thread indices")
        if e.dtype != "bool":
            fail("set_store_predicate", f"the predicate {e} of stage {self.name!r} has dtype "
                 f"{e.dtype}", "expected a boolean expression on thread indices",
                 hint="compare: tx.var == 0")
        tags = {}
        for v in free_vars(e):
            tag = self._thread_tag_of(v)
            if tag is None:
                fail("set_store_predicate", f"the predicate {e} of stage {self.name!r} "
                     f"reads {v.name!r}, which is not a thread index: elements of "
                     f"{self.name!r} would be left unwritten", "a condition on te.thread_axis "
                     "variables the stage's loops do not bind (it skips duplicate stores)")
            tags[v] = tag
        from .isl_util import condition_str  # deferred: isl_util imports tensors only

        if condition_str(e, {v: t.param for v, t in tags.items()}) is None:
            fail("set_store_predicate", f"the predicate {e} of stage {self.name!r} is not "
                 "affine in the thread indices", "comparisons of affine expressions joined "
                 "by & | ~")
        self.store_predicate, self.store_predicate_tags = e, tags
        self._record("set_store_predicate", ("predicate", e))

    def _thread_tag_of(self, v: Var) -> ThreadTag | None:
        """The hardware index variable ``v`` stands for: a ``te.thread_axis`` variable
        (named by its tag unless renamed), or the variable of a thread axis this
        schedule binds."""
        for st in self.schedule.stages:
            for iv, kind in st.annotations.items():
                if isinstance(kind, ThreadTag) and st.bound_vars.get(iv) is v:
                    return kind
        if v.name in {t.value for t in ThreadTag.hardware()} and v.dtype in ("int32",
                                                                             "int64"):
            return ThreadTag(v.name)
        return None


__all__ = ["SCOPES", "StorageMixin"]
