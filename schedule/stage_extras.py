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
from polytile.te.visitor import free_vars, substitute

from .kinds import FRAGMENT_SCOPES, ThreadTag
from .relations import Step

#: Storage scopes a stage's buffer can have (``cache_read``/``cache_write``/``set_scope``).
SCOPES = ("global", "shared", "local", *FRAGMENT_SCOPES)


class StorageMixin:
    """``set_scope``, ``set_store_predicate``, ``transform_layout``, ``env_threads`` and
    ``rolling_buffer`` of a stage."""

    def env_threads(self, threads) -> None:
        """Launch the GPU threads ``threads`` outside the time loop of this ``te.scan``
        (TVM's ``Stage.env_threads``, its persistent-kernel LSTM): every step then runs in
        one kernel. polytile already lowers a scan whose update is bound to thread axes
        that way (one kernel around the time loop, when each thread reads only what it
        wrote in earlier steps; otherwise the dependence is refused), so this checks the
        axes and records them; ``lower`` checks that each one is bound to an axis of the
        scan's update (or init).

        Raises
        ------
        ScheduleError
            When the stage is not a ``te.scan``, an element is not a ``te.thread_axis``,
            or (at lowering) a thread axis is bound to no loop of the scan.
        """
        from polytile.te.scan import ScanOp

        if not isinstance(self.op, ScanOp):
            fail("env_threads", f"stage {self.name!r} is not a te.scan",
                 "env_threads of a scan (TVM: composite operations only)")
        threads = list(threads) if isinstance(threads, (list, tuple)) else [threads]
        for t in threads:
            if getattr(t, "iter_type", None) != "thread" or not getattr(t, "thread_tag", ""):
                fail("env_threads", f"{getattr(t, 'name', t)!r} given to stage {self.name!r} "
                     "is not a thread axis", "te.thread_axis(...) objects")
        self.env_thread_axes = tuple(self.env_thread_axes) + tuple(threads)
        self.schedule.trace.append(Step("env_threads", self.name, (tuple(
            ("thread", t.thread_tag, t.var.name) for t in threads),), ()))

    def rolling_buffer(self) -> None:
        """Mark this stage's buffer as a rolling buffer (TVM's ``Stage.rolling_buffer``):
        in TVM a stage computed at a loop of its consumer keeps the rows it computed in
        the previous iteration of that loop and computes only the new ones (a sliding
        window: pooling after pooling). polytile computes the whole window in every
        iteration (the same values; overlapping rows are computed again), so this is a
        no-op on the values and the allocation; ``lower`` checks, as TVM does, that the
        stage is computed at a loop (``compute_at``).

        Raises
        ------
        ScheduleError
            For a placeholder, or (at lowering) a stage that is not computed at a loop.
        """
        self._require_compute("rolling_buffer")
        self.rolling = True
        self._record("rolling_buffer")

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
        # a reduction loop of this stage bound to a thread index stands for that index
        # (tx = s[B].op.reduce_axis[0]; s[B].bind(tx, ...); tx.var.equal(0)): the stores
        # kept are those of the cross-thread reduction's final step, as in TVM
        e = substitute(e, {iv.var: Var("int32", kind.value)
                           for iv, kind in self.annotations.items()
                           if isinstance(kind, ThreadTag) and kind.is_thread
                           and iv.iter_type == "reduce"})
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

    def transform_layout(self, mapping_function):
        """Store this stage's tensor in a new layout (TVM's ``Stage.transform_layout``):
        element ``idx`` lives at ``mapping_function(*idx)`` of a buffer whose shape is
        the image's bounding box (see :mod:`polytile.schedule.layout`).

        ``s[B].transform_layout(lambda i, j: [j, i])`` stores ``B`` transposed;
        ``lambda n, h, w, c: [n, c // 4, h, w, c % 4]`` packs NHWC into NCHW4c. Every
        access to the tensor, in every stage, uses the new positions; for an input or an
        output of the function the argument array has the new shape (as in TVM: pass
        ``a.reshape(...)``/``transpose`` of your data). Calling it again composes. For a
        compute stage the loops over its axes are replaced by loops over the new indices
        in row-major order (only where the map hits: a padded split runs no extra
        iteration), which are returned for further scheduling::

            for i in range(0, 3):                for ax0 in range(0, 5):
              for j in range(0, 5):      =>        for ax1 in range(0, 3):
                B[i, j] = ...                        B[ax0, ax1] = ...   (B is 5x3)

        Returns
        -------
        list of IterVar or None
            The new loops of a compute stage, in the order of the new indices; None for a
            placeholder.

        Raises
        ------
        ScheduleError
            For a mapping that is not quasi-affine, not injective, gives negative indices
            or uses ``te.AXIS_SEPARATOR``; for a compute stage whose axes were already
            split, fused, reordered among themselves or annotated (transform first). A
            transformed stage computed at another stage's loop is refused by ``lower``
            (its buffer is a region there, not the tensor).
        """
        from .layout import first_domain, make_index_map
        from .relations import Transform

        t = self.op.output(0)
        if t.ndim == 0:
            fail("transform_layout", f"stage {self.name!r} is 0-dimensional",
                 "a tensor with at least one dimension")
        from polytile.te import symbolic as sym

        if not all(sym.is_static(d) for d in t.shape):
            fail("transform_layout", f"stage {self.name!r} has the symbolic shape "
                 f"{tuple(sym.text(d) for d in t.shape)}", "a constant shape (the new "
                 "layout's extents are computed when the transform is applied)")
        parents = self._layout_parents()
        domain = self.layouts[-1].image if self.layouts else first_domain(t.shape)
        names = [p.var.name for p in parents] if parents else [f"i{k}" for k in
                                                              range(t.ndim)]
        m = make_index_map(self.name, mapping_function, domain, names)
        self.layouts.append(m)
        self._record("transform_layout", ("index_map", m))
        if not parents:
            return None
        taken = {v.name for v in self.all_iter_vars}
        children = []
        for k, n in enumerate(m.shape):
            name = next(x for x in (f"ax{k}", *(f"ax{k}.{j}" for j in range(1, 99)))
                        if x not in taken)
            taken.add(name)
            children.append(self._new_iv(name, n, parents[0]))
        pos = self.leaf_iter_vars.index(parents[0])
        self.leaf_iter_vars[pos:pos + len(parents)] = children
        self.relations.append(Transform(tuple(parents), tuple(children), m))
        return children

    def swizzle(self, mode: str = "128B") -> None:
        """Store this stage's shared buffer with the ``mode`` swizzle of the Hopper tensor
        cores (PTX ISA, "Shared Memory Matrix Layout", swizzling modes ``128B``, ``64B``,
        ``32B``; ``"none"`` undoes it): the buffer is a sequence of rows of ``W`` bytes
        (``W`` = 128, 64, 32), and the 16-byte chunk ``j`` of row ``r`` is stored at chunk
        ``j ^ (r / (128 / W)) % (W / 16)``, i.e. byte address bits 4.. XOR bits 7..
        (:func:`polytile.targets.cuda.wgmma.swizzle_elements`). Loops and indices do not
        change: only where each element lives. A ``wgmma`` intrinsic declared with the same
        swizzle (:func:`polytile.targets.cuda.tensor_core.wgmma_mma`) reads the buffer
        through a descriptor of that mode; 16-byte copies into it stay 16-byte copies (a
        chunk moves whole) and a warp writing whole rows spreads over every bank.

        ``s[AS].swizzle("128B")`` on a ``[BM, 64]`` float16 ``cache_read`` tile attached
        in the k loop is the K-major 128B layout of CUTLASS's ``SW128`` atoms::

            AS = alloc(float16[128, 64], scope='shared', swizzle='128B')
            AS[m, k] lives at element 64 m + 8 ((k / 8) ^ (m % 8)) + k % 8

        Legality (checked when lowering, naming the stage and ``swizzle``): the stage is
        attached with ``compute_at`` in ``shared`` memory on a CUDA target; its buffer has
        a constant shape whose innermost dimension is exactly ``W`` bytes (one swizzle row;
        split K into ``W``-byte tiles) and whose other dimensions hold a multiple of 8 rows
        (the pattern's period, ``8 W`` bytes; the buffer starts on such a boundary); no
        ``storage_align`` (padding would break the rows). The reference interpreter stores
        the elements at their swizzled places, so a layout the code does not honour shows
        up as wrong values.

        ``"128B/256"``, ``"128B/512"``, ``"128B/1024"``: the 128B pattern over rows of 256,
        512 or 1024 bytes (chunk ``j ^ r % 8`` of row ``r``) for tiles read by ``ldmatrix``
        (the mma.sync path's wide B tiles); no wgmma descriptor reads them.

        Synonyms: CUTLASS ``Swizzle<3, 4, 3>`` (``GMMA::Layout_K_SW128_Atom``), Triton's
        ``NVMMASharedLayout``, TVM TensorIR's ``transform_layout`` with an XOR index map.

        Raises
        ------
        ScheduleError
            For an unknown mode or a placeholder; when lowering, for a buffer that does
            not fit (see Legality).
        """
        from polytile.targets.cuda.wgmma import SWIZZLE_ROW_BYTES

        self._require_compute("swizzle")
        if mode != "none" and mode not in SWIZZLE_ROW_BYTES:
            fail("swizzle", f"mode {mode!r} for stage {self.name!r}",
                 f"one of {', '.join(SWIZZLE_ROW_BYTES)} or 'none'")
        self.swizzled = mode
        self._record("swizzle", mode)

    def _layout_parents(self) -> list:
        """The loops a new transform of a compute stage replaces: its axes, or the loops
        of its last transform, untouched and consecutive (else a ScheduleError)."""
        from polytile.te.tensor import PlaceholderOp

        from .relations import Transform

        if isinstance(self.op, PlaceholderOp):
            return []
        last = [r for r in self.relations if isinstance(r, Transform)]
        parents = list(last[-1].children) if last else list(self.op.axis)
        leaves = self.leaf_iter_vars
        for p in parents:
            if not any(p is v for v in leaves):
                fail("transform_layout", f"axis {p.name!r} of stage {self.name!r} was "
                     "already split or fused", "transform the layout before split/fuse of "
                     "the stage's axes", hint="schedule the loops transform_layout returns")
            if p in self.annotations:
                fail("transform_layout", f"axis {p.name!r} of stage {self.name!r} is "
                     "annotated", "transform the layout before annotating its axes")
        pos = [leaves.index(p) for p in parents]
        if pos != list(range(pos[0], pos[0] + len(parents))):
            fail("transform_layout", f"the axes of stage {self.name!r} were reordered "
                 f"([{', '.join(v.name for v in leaves)}])", "transform the layout before "
                 "reordering the stage's axes (TVM's rule)")
        return parents

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


class TensorizeMixin:
    """``tensorize`` of a stage (TVM's ``Stage.tensorize``)."""

    def tensorize(self, var, tensor_intrin) -> None:
        """Compute the loop nest under loop ``var`` with one call of ``tensor_intrin``
        (declared with :func:`polytile.te.decl_tensor_intrin`) per iteration of the loops
        outside it.

        *Rewrite* (gemv micro-kernel, ``j`` split by 16, ``k`` of extent 64)::

            for i, j.outer:                      for i, j.outer:
              for j.inner in range(16):    ->      tensorize gemv.body(A[i, 0]{64},
                C[i, 16*j.outer + j.inner] = 0                       B[16*j.outer, 0]{16x64},
                for k in range(64): C += ...                          C[i, 16*j.outer]{16})

        Legality, decided with isl when lowering (after every split/reorder/fuse, so that no
        region is stale): for every value of the loops outside ``var``, the instances of
        the stage under ``var`` are exactly the intrinsic's iteration box up to a renaming
        of the loops (the intrinsic's axes, in order, are the stage's axes that have loops
        under ``var``, in order; likewise reduce axes), every access equals the
        intrinsic's access plus an offset that depends only on the outer loops (the
        intrinsic's tensor dims are the trailing dims of the stage's buffer), and the
        body, dtypes and combiner are the intrinsic's. A reduction with reduce loops
        outside ``var`` needs the intrinsic's ``reset`` and ``update``; otherwise its
        ``body`` computes the whole reduction (including the initial value). Loops under
        ``var`` cannot be annotated, and no stage can be computed inside them.

        Synonyms: TVM ``Stage.tensorize``, TVM TensorIR ``blockize`` + ``tensorize``, Exo
        ``replace``.

        Raises
        ------
        ScheduleError
            At the call for an argument that is not a loop of the stage or not an
            intrinsic; when lowering for a nest that does not match (naming the stage, the
            loop and what differs: an extent, an access, a dtype, a reduce axis).
        """
        from polytile.te.tensor_intrin import REGISTRY, TensorIntrin

        iv = self._leaf("tensorize", var)
        if isinstance(tensor_intrin, str) and tensor_intrin in REGISTRY:
            tensor_intrin = REGISTRY[tensor_intrin]
        if not isinstance(tensor_intrin, TensorIntrin):
            fail("tensorize", f"intrinsic {tensor_intrin!r} for stage {self.name!r} is not a "
                 "declared tensor intrinsic", "the result of te.decl_tensor_intrin(...)")
        if self.tensorized is not None:
            fail("tensorize", f"stage {self.name!r} is already tensorized at "
                 f"{self.tensorized[0].name!r}", "one tensorize per stage")
        self.tensorized = (iv, tensor_intrin)
        self._record("tensorize", iv, tensor_intrin.name)
