"""A stage: the loops of one operation and the primitives that transform them.

Each primitive validates its arguments, updates the stage's relations and annotations, and
appends a :class:`~polytile.schedule.relations.Step` to the schedule's trace. Legality
against data dependences is checked at the call when it needs no other stage, and again in
``lower`` (which sees the whole program).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from polytile.errors import ScheduleError, fail, format_error
from polytile.te import symbolic as sym
from polytile.te.expr import ExprOp, IterVar, Range, Var, binary
from polytile.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor
from polytile.te.scan import ScanOp

from .kinds import Annotation, LoopKind, ThreadTag, annotation_name
from .relations import Cyclic, Fuse, Singleton, Split, Step, Transform
from .stage_extras import StorageMixin, TensorizeMixin
from .stage_pipeline import PipelineMixin
from .stage_prefetch import PrefetchMixin
from .stage_split import SymbolicSplitMixin

if TYPE_CHECKING:
    from .schedule import Schedule  # a type hint only: schedule.py imports this module

#: Thread tags ``bind`` accepts (CUDA's hardware indices; ``vthread`` runs as an unrolled
#: loop inside each thread), as written in ``te.thread_axis``.
THREAD_TAGS = tuple(t.value for t in ThreadTag)
#: Pragmas understood by ``Stage.pragma``: each maps onto an annotation.
PRAGMAS = {"unroll": LoopKind.UNROLLED, "vectorize": LoopKind.VECTORIZED,
           "parallel": LoopKind.PARALLEL, "parallel_launch_point": LoopKind.PARALLEL}
#: Pragmas that carry code for the module (extern functions of tensor intrinsics):
#: ``import_llvm`` LLVM IR text linked in, ``import_c`` C source compiled with the system
#: compiler and loaded (``llvm`` target).
IMPORT_PRAGMAS = ("import_llvm", "import_c")
#: Pragmas that are hints to the code generator and leave the loop's kind alone:
#: ``nontemporal`` streams the vector stores inside the loop past the caches, ``half2``
#: packs a float16 loop's arithmetic two lanes an instruction on CUDA, ``evict_last`` /
#: ``evict_first`` set the L1 eviction priority of its global vector loads on CUDA (see
#: :meth:`Stage.pragma`).
HINT_PRAGMAS = ("nontemporal", "half2", "evict_last", "evict_first")
#: TVM's pragmas with a value (see :meth:`Stage.pragma`): ``auto_unroll_max_step`` (an int
#: >= 0: serial loops inside of at most that many statements in all are unrolled) and
#: ``unroll_explicit`` (a bool: polytile always unrolls in the IR, so a no-op); and
#: polytile's ``min_blocks`` (GPU: blocks per SM the kernel's registers must allow).
VALUE_PRAGMAS = ("auto_unroll_max_step", "unroll_explicit", "min_blocks")
#: TVM's hints on how a parallel loop runs its threads; polytile's parallel runtime joins
#: its threads at the end of each parallel loop and gives each a block of iterations, which
#: computes the same values, so these are documented no-ops.
PARALLEL_HINTS = ("parallel_stride_pattern", "parallel_barrier_when_finish")


class Stage(StorageMixin, TensorizeMixin, PipelineMixin, PrefetchMixin, SymbolicSplitMixin):
    """The schedule of one operation (TVM's ``Stage``), obtained as ``s[tensor]``.

    Attributes
    ----------
    op : Operation
    all_iter_vars : list of IterVar
        Root axes, reduce axes, then every variable created by split/fuse, in creation order.
    leaf_iter_vars : list of IterVar
        The loops of the stage, outermost first.
    relations : list of Split or Fuse
    annotations : dict of IterVar to LoopKind or ThreadTag
        What ``vectorize``/``unroll``/``parallel`` made of a loop, or the hardware index
        ``bind`` mapped it onto (:mod:`polytile.schedule.kinds`).
    attach_type : str
        ``"root"``, ``"inline"`` or ``"scope"`` (computed at ``attach_stage``'s
        ``attach_ivar``).
    """

    def __init__(self, op: Operation, sch: Schedule):
        self.op = op
        self.schedule = sch
        if isinstance(op, ComputeOp):
            roots = list(op.axis) + list(op.reduce_axis)
        else:
            roots = []
        self.all_iter_vars: list[IterVar] = list(roots)
        self.leaf_iter_vars: list[IterVar] = list(roots)
        self.relations: list = []
        self.annotations: dict[IterVar, Annotation] = {}
        self.pragmas: dict[IterVar, tuple] = {}
        self.attach_type = "root"
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        #: storage scope of the stage's buffer: "" (decided at lower), "global", "shared",
        #: "local" (set by cache_read/cache_write)
        self.scope = ""
        #: padding of the buffer's rows: {axis position: (factor, offset)} (storage_align)
        self.align: dict[int, tuple[int, int]] = {}
        #: GPU: run the stage only where these thread indices have these values
        #: (set for the final step of a cross-thread reduction)
        self.thread_predicate: dict[str, int] = {}
        #: loops bound to a thread axis created with a range: {loop: the range's extent}
        #: (checked against the loop's real extent when kernels are formed)
        self.thread_extents: dict[IterVar, int] = {}
        #: the primitive that set ``scope`` (named by errors about it)
        self.scope_primitive = ""
        #: set_store_predicate: the condition (on thread indices) of the stage's stores,
        #: and the thread tag of each of its variables
        self.store_predicate = None
        self.store_predicate_tags: dict = {}
        #: transform_layout: the index maps of the stage's buffer, in order
        self.layouts: list = []
        #: swizzle: the swizzle mode of the stage's shared buffer ("none", "128B", ...)
        self.swizzled = "none"
        #: create_group: the group the stage belongs to
        self.group = None
        #: bind: the thread-axis variable each bound loop stands for
        self.bound_vars: dict = {}
        self.bound_axes: dict = {}   # loop -> the thread axis (te.thread_axis) it is bound to
        #: tensorize: (loop, TensorIntrin)
        self.tensorized = None
        #: env_threads (a te.scan): the thread axes launched around its time loop
        self.env_thread_axes: tuple = ()
        #: rolling_buffer: TVM's sliding-window buffer (the values are recomputed here)
        self.rolling = False

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def origin_op(self) -> Operation:
        return self.op

    def __repr__(self) -> str:
        return f"Stage({self.name}, leaves=[{', '.join(v.name for v in self.leaf_iter_vars)}])"

    # helpers ---------------------------------------------------------------------------
    def _record(self, primitive: str, *args, **kwargs) -> None:
        def enc(a):
            if isinstance(a, IterVar):
                return ("iv", self._index_of(a), a.name)
            if isinstance(a, Stage):
                return ("stage", a.name)
            if isinstance(a, (list, tuple)):
                return tuple(enc(x) for x in a)
            return a

        self.schedule.trace.append(Step(primitive, self.name, tuple(enc(a) for a in args),
                                        tuple((k, enc(v)) for k, v in kwargs.items())))

    def _index_of(self, iv: IterVar) -> int:
        if isinstance(self.op, ScanOp):
            iv = self.op.axis_alias().get(id(iv), iv)
        for k, v in enumerate(self.all_iter_vars):
            if v is iv:
                return k
        # thread axes are not iteration variables of a stage
        return -1

    def _require_compute(self, primitive: str) -> None:
        if isinstance(self.op, PlaceholderOp):
            fail(primitive, f"stage {self.name!r} is a placeholder (an input) and has no "
                       f"loops", "schedule a compute stage")

    def _leaf(self, primitive: str, iv, role: str = "axis") -> IterVar:
        """Check that ``iv`` is a current loop of this stage and return it."""
        self._require_compute(primitive)
        if isinstance(iv, (list, tuple)) and all(isinstance(v, IterVar) for v in iv):
            names = ", ".join(repr(v.name) for v in iv)
            many = primitive in ("reorder", "fuse")
            which = "an argument" if many else f"the {role} argument"
            fail(primitive, f"{which} of stage {self.name!r} is a {type(iv).__name__} "
                       f"of {len(iv)} axes [{names}]", "expected one IterVar per argument",
                       hint=f"s[{self.name}].{primitive}(*axes)" if many else
                       f"pick one, e.g. s[{self.name}].op.axis[0]")
        if not isinstance(iv, IterVar):
            fail(primitive, f"{role} {iv!r} is not an IterVar",
                       "pass an axis such as C.op.axis[0] or a result of split/fuse")
        if isinstance(self.op, ScanOp):   # an axis of another update of the scan
            iv = self.op.axis_alias().get(id(iv), iv)
        for v in self.leaf_iter_vars:
            if v is iv:
                return iv
        for rel in self.relations:
            if isinstance(rel, (Split, Cyclic)) and rel.parent is iv:
                fail(primitive, f"iter_var {iv.name!r} of stage {self.name!r} was already "
                           f"split into {rel.outer.name!r} and {rel.inner.name!r}",
                           "use one of those instead")
            if isinstance(rel, Fuse) and (rel.outer is iv or rel.inner is iv):
                fail(primitive, f"iter_var {iv.name!r} of stage {self.name!r} was already "
                           f"fused into {rel.fused.name!r}", "use the fused axis instead")
            if isinstance(rel, Transform) and any(p is iv for p in rel.parents):
                fail(primitive, f"iter_var {iv.name!r} of stage {self.name!r} was replaced "
                     f"by transform_layout with [{', '.join(c.name for c in rel.children)}]",
                     "use the loops transform_layout returned")
        owner = self.schedule._owner_of(iv)
        where = (f"it belongs to stage {owner.name!r}" if owner else
                 "it belongs to no stage of this schedule: an axis of another compute, or "
                 "of a schedule created before")
        fail(primitive, f"iter_var {iv.name!r} is not an axis of stage {self.name!r} "
                   f"({where})", f"expected one of [{self._leaf_names()}]")

    @property
    def iter_var_attrs(self) -> dict:
        """TVM's ``Stage.iter_var_attrs``: ``{loop: IterVarAttr}`` of the annotated loops
        (see :mod:`polytile.schedule.iter_attrs`)."""
        from .iter_attrs import iter_var_attrs

        return iter_var_attrs(self)

    def _leaf_names(self) -> str:
        return ", ".join(repr(v.name) for v in self.leaf_iter_vars)

    def extent_of(self, iv: IterVar) -> int:
        """Nominal extent of an iteration variable of this stage (the range its loop spans
        in a full tile)."""
        if iv.dom is not None:
            return iv.dom.extent
        raise ScheduleError(f"extent: iter_var {iv.name!r} has no range")

    def _new_iv(self, name: str, extent: int, like: IterVar) -> IterVar:
        iv = IterVar(Var("int32", name, True), Range(0, extent), like.iter_type)
        self.all_iter_vars.append(iv)
        return iv

    # primitives --------------------------------------------------------------------------
    def split(self, parent: IterVar, factor: int | None = None, nparts: int | None = None,
              disable_predication: bool = False) -> tuple[IterVar, IterVar]:
        """Split a loop in two: ``parent = outer * factor + inner`` (``0 <= inner < factor``).

        Rewrite (``split(i, factor=4)``, extent 10)::

            for i in range(0, 10):          for i.outer in range(0, 3):
              body(i)                 =>      for i.inner in range(0, min(4, 10 - 4*i.outer)):
                                                body(i.outer*4 + i.inner)

        Tail: a non-divisible factor gives an exact partial last tile (no guard, no
        wasted iterations); ``lower`` separates full tiles from it where vectorize/unroll
        need constant extents. ``nparts=p`` sets ``factor = ceil(extent / p)``.
        Always legal.

        Symbolic factors (TVM allows any integer expression): ``factor=n // 4``,
        ``factor=nthread`` (a ``te.var`` passed as a scalar argument) or ``nparts=`` of a
        symbolic extent. isl cannot represent ``floor(x / f)`` for a parameter ``f``, so
        the two loops are one loop over ``x`` for isl and are strip-mined after code
        generation: ``for x.outer in range(ceil(E / f)): for x.inner in range(min(f,
        E - f * x.outer))``. They must stay adjacent (no reorder between them), neither can
        be split, fused, vectorized, unrolled, bound to a GPU index (except the pair
        ``x.outer`` -> ``blockIdx``, ``x.inner`` -> ``threadIdx`` on CUDA) or hold a
        ``compute_at``; ``x.outer`` may be ``parallel``. ``f >= 1`` is checked at each
        call. Synonyms: Halide ``split``, loopy ``split_iname``, Exo ``divide_loop``.

        ``disable_predication=True`` is accepted as TVM accepts it, and changes nothing.
        In TVM it drops the guard of a non-divisible split, so that the last tile runs
        past the extent: its iterations read and write out of bounds unless the user
        padded the buffers, a promise TVM cannot check. polytile never needs that guard
        (the partial tile is an exact loop bound, no iteration lies past the extent), so
        the result is the compute definition's whether the factor divides or not: what
        TVM gives where its use is safe, and no out-of-bounds access where it is not.

        Raises
        ------
        ScheduleError
            If ``parent`` is not a loop of this stage, or factor/nparts is missing, both
            given, or not a positive int, or ``disable_predication`` is not a bool.
        """
        if not isinstance(disable_predication, (bool, np.bool_)):
            fail("split", f"disable_predication={disable_predication!r} for stage "
                 f"{self.name!r}", "expected True or False")
        parent = self._leaf("split", parent)
        self._check_not_annotated("split", parent)
        if not (self._fused_symbolic(parent) and isinstance(factor, (int, np.integer))
                and not isinstance(factor, bool) and nparts is None):
            self._check_not_symbolic_split("split", parent)
        if (factor is None) == (nparts is None):
            got = "both factor= and nparts=" if factor is not None else "neither factor= nor "\
                "nparts="
            fail("split", f"iter_var {parent.name!r} of stage {self.name!r} got {got}",
                       "give exactly one of factor= and nparts=",
                       hint=f"split({parent.name}, factor=4) or split({parent.name}, nparts=4)")
        which, val = ("factor", factor) if factor is not None else ("nparts", nparts)
        if isinstance(val, np.integer):  # numpy ints are ints; the trace keeps plain ones
            val = int(val)
            factor, nparts = (val, None) if which == "factor" else (None, val)
        if isinstance(val, ExprOp) and sym.static(val) is not None:
            val = sym.static(val)
            factor, nparts = (val, None) if which == "factor" else (None, val)
        if not isinstance(val, ExprOp) and (isinstance(val, bool) or not isinstance(val, int)
                                            or val < 1):
            fail("split", f"{which}={val!r} for iter_var {parent.name!r} of stage "
                       f"{self.name!r}", "expected a positive int or an integer expression "
                       "of size parameters")
        ext = self.extent_of(parent)
        if isinstance(val, ExprOp) or (factor is None and not sym.is_static(ext)):
            return self._split_symbolic(parent, which, val, ext)
        ext = sym.static(ext) if sym.is_static(ext) else ext
        # an empty loop split in parts: inner loops of one iteration, none of them run
        f = val if factor is not None else max(1, -(-ext // val))
        outer = self._new_iv(f"{parent.name}.outer", sym.ceildiv(ext, f), parent)
        inner = self._new_iv(f"{parent.name}.inner", f, parent)
        self.relations.append(Split(parent, outer, inner, f, nparts or 0))
        k = self.leaf_iter_vars.index(parent)
        self.leaf_iter_vars[k:k + 1] = [outer, inner]
        self._move_attach(parent, inner)
        self._record("split", parent, **({"factor": factor} if factor is not None
                                          else {"nparts": nparts}))
        return outer, inner

    def _check_not_annotated(self, primitive: str, iv: IterVar) -> None:
        kind = self.annotations.get(iv)
        if kind is not None:
            fail(primitive, f"iter_var {iv.name!r} of stage {self.name!r} is annotated "
                 f"{annotation_name(kind)!r}", f"{primitive} loops before annotating them")

    def _attached_at(self, iv: IterVar) -> list[Stage]:
        return [st for st in self.schedule.stages
                if st.attach_stage is self and st.attach_ivar is iv]

    def _move_attach(self, old: IterVar, new: IterVar) -> None:
        # the stages computed inside `old` stay inside each iteration of `new`
        for st in self._attached_at(old):
            st.attach_ivar = new

    def tile(self, x_parent: IterVar, y_parent: IterVar, x_factor: int, y_factor: int
             ) -> tuple[IterVar, IterVar, IterVar, IterVar]:
        """Tile two loops: ``split(x)``, ``split(y)``, then ``reorder(xo, yo, xi, yi)``.

        Returns ``(x.outer, y.outer, x.inner, y.inner)``. Built from split and reorder;
        raises what they raise.
        """
        n = len(self.schedule.trace)
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        del self.schedule.trace[n:]
        self._record("tile", x_parent, y_parent, x_factor, y_factor)
        return xo, yo, xi, yi

    def fuse(self, *args: IterVar) -> IterVar:
        """Fuse adjacent loops into one: ``fused = outer * extent(inner) + inner``.

        The axes must be consecutive in the current loop order, outermost first, and of one
        kind (all spatial or all reduction). Legal whenever the loops were adjacent.

        ``fuse()`` with no axes (TVM's special case) adds a new outermost loop of one
        iteration, ``singleton``, derived from no axis: a loop to ``bind`` or
        ``compute_at`` for a stage that has none (a 0-d output).

        Rewrite (``fuse(i, j)``, extents 3 and 5)::

            for i in range(0, 3):             for i.j.fused in range(0, 15):
              for j in range(0, 5):     =>      body(i.j.fused // 5, i.j.fused % 5)
                body(i, j)

        Synonyms: Halide ``fuse``, loopy ``join_inames``, Exo ``merge_loops``.

        Raises
        ------
        ScheduleError
            For non-adjacent loops, mixed spatial/reduce axes, or foreign axes.
        """
        if not args:
            return self._singleton()
        ivs = [self._leaf("fuse", a) for a in args]
        if len(ivs) == 1:
            return ivs[0]
        for iv in ivs:
            self._check_not_annotated("fuse", iv)
            self._check_not_symbolic_split("fuse", iv)
        for iv in ivs[:-1]:
            for st in self._attached_at(iv):
                fail("fuse", f"stage {st.name!r} is computed at {iv.name!r}, which is "
                           f"not the innermost of the fused loops",
                           "fuse first, then compute_at the fused loop")
        n = len(self.schedule.trace)
        cur = ivs[0]
        for nxt in ivs[1:]:
            cur = self._fuse2(cur, nxt)
        del self.schedule.trace[n:]
        self._record("fuse", *ivs)
        return cur

    def _singleton(self) -> IterVar:
        self._require_compute("fuse")
        taken = {v.name for v in self.all_iter_vars}
        name = next(n for n in ("singleton", *(f"singleton.{k}" for k in range(1, 99)))
                    if n not in taken)
        iv = IterVar(Var("int32", name, True), Range(0, 1), "data_par")
        self.all_iter_vars.append(iv)
        self.relations.append(Singleton(iv))
        self.leaf_iter_vars.insert(0, iv)
        self._record("fuse")
        return iv

    def _fuse2(self, outer: IterVar, inner: IterVar) -> IterVar:
        lo = self.leaf_iter_vars.index(outer)
        li = self.leaf_iter_vars.index(inner)
        if li == lo - 1:
            fail("fuse", f"iter_vars {outer.name!r} and {inner.name!r} of stage "
                       f"{self.name!r} are given inner first: {inner.name!r} is the outer "
                       f"loop in [{self._leaf_names()}]", "pass adjacent loops outermost first",
                       hint=f"fuse({inner.name}, {outer.name})")
        if li != lo + 1:
            fail("fuse", f"iter_vars {outer.name!r} and {inner.name!r} of stage "
                       f"{self.name!r} are not adjacent in the loop order "
                       f"[{self._leaf_names()}]", "fuse consecutive loops, outermost first "
                       "(reorder first)")
        if outer.iter_type != inner.iter_type:
            fail("fuse", f"stage {self.name!r}: {outer.name!r} is a {outer.iter_type} "
                       f"axis and {inner.name!r} a {inner.iter_type} axis",
                       "fuse axes of one kind")
        symbolic = not sym.is_static(self.extent_of(inner)) or any(
            r.fused is outer and r.sym for r in self.relations if isinstance(r, Fuse))
        ext = sym.mul(self.extent_of(outer), self.extent_of(inner)) if not symbolic else \
            binary("mul", sym.as_expr(self.extent_of(outer)), sym.as_expr(self.extent_of(inner)))
        fused = self._new_iv(f"{outer.name}.{inner.name}.fused", ext, outer)
        self.relations.append(Fuse(outer, inner, fused, symbolic))
        self.leaf_iter_vars[lo:li + 1] = [fused]
        self._move_attach(inner, fused)
        return fused

    def reorder(self, *args: IterVar) -> None:
        """Reorder loops: the positions held by ``args`` are refilled in the given order.

        Legal when every dependence stays lexicographically positive (checked in ``lower``;
        pure computes and commutative reductions always are).

        Raises
        ------
        ScheduleError
            For an axis given twice or not a loop of this stage.
        """
        ivs = [self._leaf("reorder", a) for a in args]
        if len({id(v) for v in ivs}) != len(ivs):
            dup = next(v for v in ivs if sum(w is v for w in ivs) > 1)
            fail("reorder", f"iter_var {dup.name!r} appears twice",
                       f"list each axis of stage {self.name!r} once")
        pos = sorted(self.leaf_iter_vars.index(v) for v in ivs)
        for p, v in zip(pos, ivs):
            self.leaf_iter_vars[p] = v
        self._record("reorder", *ivs)

    def _annotate(self, primitive: str, iv: IterVar, kind: Annotation) -> None:
        iv = self._leaf(primitive, iv)
        old = self.annotations.get(iv)
        if old is not None and old != kind:
            fail(primitive, f"iter_var {iv.name!r} of stage {self.name!r} is already "
                 f"annotated {annotation_name(old)!r}",
                 "expected one annotation per loop (vectorize, unroll, parallel or one bind)")
        self.annotations[iv] = kind

    def vectorize(self, iv: IterVar) -> None:
        """Run the iterations of loop ``iv`` as SIMD lanes.

        It must carry no dependence (a reduction axis cannot be vectorized: use rfactor).
        Partial tiles run as scalar loops. A spatial loop with serial or unrolled loops
        inside it is vectorized as an outer loop (TVM, Halide: the inner loops run once
        over vectors of lanes, e.g. ``j.inner`` of a matmul with ``k`` inside), lowered
        as the loop moved innermost (``validate.interchange_outer_vectorized``); a
        parallel, bound or vectorized loop inside it is refused. A stage computed at the
        vectorized loop (or inside it) computes the region of all its lanes, at the loop
        around it (``validate.hoist_out_of_vector_loops``; TVM widens its buffer by the
        lanes).

        Limit: any constant extent is accepted. On CPUs, a loop longer than one SIMD
        register (the target's width over the widest element the loop accesses, e.g. 16
        float32 with AVX-512, 8 with AVX2) is strip-mined into a loop over native vectors
        plus one narrower vector for the remainder, so that a vectorize of 1000 or 2**20
        builds as fast as one of 16. On GPUs the loop is unrolled (``#pragma unroll`` up to
        ``passes.loops.MAX_UNROLL`` iterations, a plain loop beyond).
        """
        self._annotate("vectorize", iv, LoopKind.VECTORIZED)
        self._record("vectorize", iv)

    def unroll(self, iv: IterVar) -> None:
        """Unroll loop ``iv``: one copy of its body per iteration, with constant indices.

        Legal whenever the loop order is (unrolling keeps the order). Full tiles are
        unrolled; the partial tile of a non-divisible split stays a loop.

        Limits (``polytile.schedule.limits``): a loop of more than
        ``passes.loops.MAX_UNROLL`` (256) iterations, or one whose expansion would hold
        more than ``passes.loops.MAX_UNROLL_STMTS`` (1024) statements (its iterations times
        its body, where unrolled loops inside count expanded: nested unrolls multiply, and
        a loop kept inside counts ``passes.loops.LOOP_STMTS`` (8) plus its body), is
        kept as a loop, and ``lower``/``build`` issue a
        :class:`~polytile.errors.PolytileWarning` naming the stage and loop. Inner loops
        are served first, so among nested unrolls the outer ones stay loops. To unroll a
        long loop partially, split it and unroll the inner part.
        """
        self._annotate("unroll", iv, LoopKind.UNROLLED)
        self._record("unroll", iv)

    def parallel(self, iv: IterVar) -> None:
        """Run the iterations of loop ``iv`` on several CPU threads (OpenMP runtime).

        Legal when the loop carries no dependence (zero distance at ``iv``); a reduction
        axis is refused (use rfactor). A parallel loop nested in another runs serially.
        """
        iv = self._leaf("parallel", iv)
        k = self.leaf_iter_vars.index(iv)
        for x in self.leaf_iter_vars[:k]:
            # a launch point outside a parallel loop starts the threads of that loop (TVM):
            # it is no longer a parallel loop of its own
            if (self.annotations.get(x) == LoopKind.PARALLEL and
                    any(p == "parallel_launch_point" for p, _ in self.pragmas.get(x, ()))
                    and not any(p == "parallel" for p, _ in self.pragmas.get(x, ()))):
                del self.annotations[x]
        self._annotate("parallel", iv, LoopKind.PARALLEL)
        self._record("parallel", iv)

    def bind(self, iv: IterVar, thread_ivar: IterVar) -> None:
        """Map loop ``iv`` onto a GPU hardware index (``te.thread_axis("threadIdx.x")``).

        Each value of the loop runs on its own block or thread: the loop disappears and its
        variable becomes the index. A reduction axis bound to ``threadIdx.*`` becomes a
        cross-thread reduction. Legal when the loop carries no dependence other than such a
        reduction.

        Raises
        ------
        ScheduleError
            If ``thread_ivar`` is not a thread axis, the loop is already annotated, or the
            same thread axis is bound twice in this stage. A thread axis created with a
            range (``te.thread_axis((0, 32), "threadIdx.x")``) must match the loop's extent
            (checked by ``lower``).
        """
        iv = self._leaf("bind", iv)
        if not isinstance(thread_ivar, IterVar) or thread_ivar.iter_type != "thread":
            fail("bind", f"{thread_ivar!r} is not a thread axis",
                       "create one with te.thread_axis('threadIdx.x')")
        tag = ThreadTag(thread_ivar.thread_tag)
        for other, kind in self.annotations.items():
            if kind is tag and other is not iv and tag is not ThreadTag.VTHREAD:
                fail("bind", f"thread axis {tag.value!r} is bound twice in stage "
                     f"{self.name!r} (to {other.name!r} and {iv.name!r})",
                     "bind each thread axis once per stage")
        self._annotate("bind", iv, tag)
        self.bound_vars[iv] = thread_ivar.var
        self.bound_axes[iv] = thread_ivar
        if thread_ivar.dom is not None:
            self.thread_extents[iv] = thread_ivar.dom.extent
        self._record("bind", iv, ("thread", tag.value, thread_ivar.var.name))

    def storage_align(self, axis: IterVar, factor: int, offset: int) -> None:
        """Pad the buffer of this stage so that the stride of dimension ``axis`` is
        ``k * factor + offset`` elements (avoids shared-memory bank conflicts). It applies
        to an intermediate stage, at root or computed at a loop (its buffer must have a
        constant shape).

        Raises
        ------
        ScheduleError
            If ``axis`` is not a root axis of this stage or factor/offset are invalid; when
            lowering, for a stage that is an argument of the function (the caller's array
            is compact) or whose buffer has a symbolic shape.
        """
        self._require_compute("storage_align")
        pos = next((k for k, a in enumerate(self.op.axis) if a is axis), None)
        if pos is None:
            fail("storage_align", f"{getattr(axis, 'name', axis)!r} is not a root axis "
                       f"of stage {self.name!r}", f"pass one of s[{self.name}].op.axis")
        if not (isinstance(factor, int) and factor >= 1 and isinstance(offset, int)
                and 0 <= offset < factor):
            fail("storage_align", f"factor={factor!r}, offset={offset!r}",
                       "expected ints with factor >= 1 and 0 <= offset < factor")
        self.align[pos] = (factor, offset)
        self._record("storage_align", axis, factor, offset)

    def pragma(self, iv: IterVar, pragma_type: str, pragma_value=None) -> None:
        """Annotate loop ``iv`` with a pragma: ``"unroll"``, ``"vectorize"``, ``"parallel"``
        (the annotations of the same names) or ``"parallel_launch_point"``; or attach code
        to the module (TVM's): ``"import_llvm"`` (LLVM IR text, linked in) and
        ``"import_c"`` (C source, compiled with the system compiler and loaded), which
        define the extern functions of tensor intrinsics on the ``llvm`` target.

        ``"nontemporal"`` (a hint; the loop keeps its kind): contiguous vector stores nested
        in loop ``iv`` are non-temporal on the ``llvm`` target (x86 ``movntps``, LLVM's
        ``!nontemporal``): they go to memory without first reading the line into the cache
        (no read-for-ownership) and without evicting what the cache holds. That saves a
        third of the memory traffic of a kernel that writes a large output once and never
        reads it back soon (a copy, a softmax or layernorm over rows larger than the last
        level cache), and costs time when the output is read again while still cached. A
        store whose address is not 16-byte aligned at run time is an ordinary store; scalar
        stores (loop tails) stay ordinary. Functions that stream stores end them with a
        fence (and fence before starting threads), so the values are visible to the other
        threads and to the caller. On the ``cuda`` target, global vector stores (a
        vectorized copy from registers, as the row kernels' outputs) nested in the loop are
        streaming stores (PTX ``st.global.cs``: evicted first from the caches); scalar
        stores stay ordinary. Other targets ignore the hint. Like Intel's
        ``#pragma vector nontemporal``.

        ``"evict_last"`` / ``"evict_first"`` (hints; CUDA): global vector loads into
        registers or shared memory nested in loop ``iv`` (a vectorized copy, as a
        ``cache_read`` to ``local``) are read-only loads with that L1 eviction priority:
        PTX ``ld.global.nc.L1::evict_last`` (kept in L1 over other lines: data every block
        of an SM reads again, as layernorm's gamma and beta) or ``ld.global.nc
        .L1::evict_first`` (evicted first: data read once, as the rows of a row kernel).
        The data must not be written during the kernel (the read-only path). Scalar loads
        stay ordinary; other targets ignore the hints.

        ``"half2"`` (a hint; CUDA): loop ``iv``, vectorized or unrolled, of a constant even
        extent and whose body stores one ``float16`` value, is printed by pairs of lanes,
        its float16 ``+``, ``-`` and ``*`` as one ``half2`` instruction for both lanes
        (``__hadd2``, ``__hsub2``, ``__hmul2``; ``a * b + c`` as ``__hfma2``: one rounding
        instead of two, as float32 ``a * b + c`` may contract into an FMA), other float16
        operands packed from their lanes and float32 values converted two at a time
        (``__floats2half2_rn``). Each lane's arithmetic is the statement's, in float16 (half
        the instructions of the scalar half operations, which ``cuda_fp16.h`` writes as
        inline assembly nvcc neither fuses nor pairs). A loop that is not of that form
        raises ``BuildError`` when the CUDA source is printed; other targets ignore the
        hint.

        TVM's other loop pragmas:

        * ``"auto_unroll_max_step", N`` (TVM's ``UnrollLoop``): every serial loop nested
          inside ``iv`` (not ``iv`` itself) with a constant extent, no rolled loop inside
          it, and at most ``N`` statements once expanded (its extent times the statements
          of its body, counting the expansions of loops inside) is unrolled; capped by the
          code-size limit of ``unroll`` (``passes.loops.MAX_UNROLL_STMTS``).
        * ``"unroll_explicit", b``: TVM unrolls in the IR when true and leaves
          ``#pragma unroll`` to the C compiler when false; polytile always unrolls in the IR
          (same values), so the value is checked and ignored.
        * ``"min_blocks", N`` (GPU; polytile's): the kernel whose root stage this is gets
          ``__launch_bounds__(threads, N)`` on CUDA (ptxas keeps the registers per thread
          low enough for ``N`` resident blocks per SM; registers past that spill), as the
          ``-min-blocks=N`` target option does for every kernel of a module; any loop of
          the stage (its block loop by convention), 1 to 32.
        * ``"parallel_launch_point"``: with a ``parallel`` loop inside ``iv`` (TVM's use),
          the threads of that loop start at ``iv`` in TVM and at the parallel loop in
          polytile: same values, ``iv`` stays serial. Without one, ``iv`` is parallel.
        * ``"parallel_stride_pattern"``, ``"parallel_barrier_when_finish"``: how TVM shares
          iterations among threads and joins them; polytile's runtime gives each thread a
          block of iterations and joins them at the end of every parallel loop, so these
          are no-ops.

        Raises
        ------
        ScheduleError
            For an unknown pragma (the message lists the known ones), or a value of the
            wrong type.
        """
        if pragma_type in IMPORT_PRAGMAS:
            iv = self._leaf("pragma", iv)
            if not isinstance(pragma_value, str):
                fail("pragma", f"{pragma_type!r} on stage {self.name!r} has value "
                     f"{type(pragma_value).__name__}", "the source text (a str)")
            self.pragmas[iv] = self.pragmas.get(iv, ()) + ((pragma_type, pragma_value),)
            self._record("pragma", iv, pragma_type, pragma_value)
            return
        if pragma_type in HINT_PRAGMAS:
            iv = self._leaf("pragma", iv)
            if pragma_value is not None:
                fail("pragma", f"{pragma_type!r} on stage {self.name!r} has value "
                     f"{pragma_value!r}", "expected no value (the hint takes none)")
            dtypes = {o.dtype for o in self.op.outputs} if isinstance(self.op, ComputeOp) \
                else set()
            if pragma_type == "half2" and dtypes != {"float16"}:
                fail("pragma", f"'half2' on axis {iv.name!r} of stage {self.name!r}, whose "
                     f"outputs are {sorted(dtypes) or 'not computed'}",
                     "a stage computing float16 values (its float16 arithmetic is paired)")
            self.pragmas[iv] = self.pragmas.get(iv, ()) + ((pragma_type, None),)
            self._record("pragma", iv, pragma_type, None)
            return
        if pragma_type in VALUE_PRAGMAS or pragma_type in PARALLEL_HINTS:
            iv = self._leaf("pragma", iv)
            pragma_value = self._hint_value(iv, pragma_type, pragma_value)
            self.pragmas[iv] = self.pragmas.get(iv, ()) + ((pragma_type, pragma_value),)
            self._record("pragma", iv, pragma_type, pragma_value)
            return
        if pragma_type not in PRAGMAS:
            self._leaf("pragma", iv)
            known = sorted(PRAGMAS) + sorted(IMPORT_PRAGMAS + HINT_PRAGMAS) + sorted(
                VALUE_PRAGMAS + PARALLEL_HINTS)
            fail("pragma", f"unknown pragma {pragma_type!r} on iter_var {iv.name!r} of "
                       f"stage {self.name!r}", f"expected one of {known}")
        iv = self._leaf("pragma", iv)
        if pragma_type == "parallel_launch_point" and self._parallel_inside(iv):
            # TVM: the threads start here and the parallel loop inside shares its
            # iterations among them; polytile starts them at that inner loop (same values),
            # so the loop itself keeps its kind and need not be parallel-legal
            self.pragmas[iv] = self.pragmas.get(iv, ()) + ((pragma_type, pragma_value),)
            self._record("pragma", iv, pragma_type, pragma_value)
            return
        self._annotate("pragma", iv, PRAGMAS[pragma_type])
        self.pragmas[iv] = self.pragmas.get(iv, ()) + ((pragma_type, pragma_value),)
        self._record("pragma", iv, pragma_type, pragma_value)

    def _hint_value(self, iv: IterVar, key: str, value):
        """The checked value of hint pragma ``key`` on loop ``iv``."""
        if key == "min_blocks":
            v = getattr(value, "value", value)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= 32:
                fail("pragma", f"'min_blocks' on iter_var {iv.name!r} of stage {self.name!r} "
                     f"has value {value!r}", "an int from 1 to 32 (blocks per SM)")
            return int(v)
        if key == "auto_unroll_max_step":
            v = getattr(value, "value", value)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                fail("pragma", f"'auto_unroll_max_step' on iter_var {iv.name!r} of stage "
                     f"{self.name!r} has value {value!r}", "an int >= 0 (the most "
                     "statements an unrolled loop nest may expand to)")
            return int(v)
        v = getattr(value, "value", value)
        if v is not None and not isinstance(v, (bool, int, np.integer)):
            fail("pragma", f"{key!r} on iter_var {iv.name!r} of stage {self.name!r} has "
                 f"value {value!r}", "a bool, an int or None")
        return None if v is None else int(v)

    def _parallel_inside(self, iv: IterVar) -> bool:
        """True when a loop after ``iv`` in the stage's leaf order is ``parallel``."""
        k = self.leaf_iter_vars.index(iv)
        return any(self.annotations.get(x) == LoopKind.PARALLEL
                   for x in self.leaf_iter_vars[k + 1:])

    def compute_inline(self) -> None:
        """Substitute this stage's expression into every consumer; it gets no loops.

        Raises
        ------
        ScheduleError
            For a reduction, a placeholder, or an output of the schedule.
        """
        self._require_compute("compute_inline")
        self._refuse_scan("compute_inline")
        if self.op.reduce_axis:
            fail("compute_inline", f"stage {self.name!r} is a reduction",
                       "only elementwise computes can be inlined",
                       hint="use compute_at to fuse a reduction into its consumer")
        if self.op in self.schedule.outputs:
            fail("compute_inline", f"stage {self.name!r} is an output of the schedule",
                       "inline intermediate stages only")
        from polytile.te.tensor_intrin import EXTERN_KEY

        for st in self.schedule.stages:
            if getattr(st.op, "attrs", {}).get(EXTERN_KEY) is not None and any(
                    t.op is self.op for t in st.op.input_tensors):
                fail("compute_inline", f"stage {self.name!r} is read by the te.extern "
                     f"{st.name!r}, whose external code reads its array",
                     "leave it computed at the root (inline its own inputs into it instead)")
        self.attach_type, self.attach_stage, self.attach_ivar = "inline", None, None
        self._record("compute_inline")

    def _refuse_scan(self, primitive: str) -> None:
        """A scan reads the rows it wrote before: it needs its whole buffer at the root."""
        if isinstance(self.op, ScanOp):
            fail(primitive, f"stage {self.name!r} is a te.scan, which reads its own earlier "
                 f"rows", "a scan computed at the root",
                 hint="schedule its spatial axes instead (split, parallel, bind)")

    def compute_root(self) -> None:
        """Compute this stage in its own loop nest at the top level (the default), or, for
        a member of a group (``Schedule.create_group``) that is computed at a loop, at
        the group's loop (TVM's ``kGroupRoot``)."""
        self._require_compute("compute_root")
        g = self.group
        if g is not None and g.attach_stage is not None:
            self.attach_type, self.attach_stage, self.attach_ivar = (
                "scope", g.attach_stage, g.attach_ivar)
        else:
            self.attach_type, self.attach_stage, self.attach_ivar = "root", None, None
        self._record("compute_root")

    def compute_at(self, parent: Stage, scope: IterVar) -> None:
        """Compute this stage inside loop ``scope`` of its consumer ``parent``.

        Each iteration of ``scope`` computes exactly the region of this stage that the
        consumer reads in that iteration (the image of the consumer's accesses, found with
        isl, halos included), into a buffer of the region's bounding box.

        Raises
        ------
        ScheduleError
            If ``parent`` does not read this stage, ``scope`` is not a loop of ``parent``,
            the attach would form a cycle, or this stage is an output.
        """
        self._require_compute("compute_at")
        self._refuse_scan("compute_at")
        if isinstance(parent, Tensor):
            parent = self.schedule[parent]
        if not isinstance(parent, Stage) or parent.schedule is not self.schedule:
            fail("compute_at", f"parent {parent!r} is not a stage of this schedule",
                       "pass s[consumer]")
        if parent is self:
            fail("compute_at", f"stage {self.name!r} cannot be computed inside itself")
        scope = parent._leaf("compute_at", scope, role="scope")
        if self.op in self.schedule.outputs:
            fail("compute_at", f"stage {self.name!r} is an output of the schedule",
                       "attach intermediate stages only")
        st = parent
        while st is not None:
            if st is self:
                fail("compute_at", f"attaching {self.name!r} to {parent.name!r} forms a "
                           f"cycle of attaches", "attach a producer to its consumer")
            st = st.attach_stage
        if not self.schedule._reads_transitively(parent.op, self.op):
            fail("compute_at", f"stage {parent.name!r} does not read {self.name!r}",
                       f"attach {self.name!r} to one of its consumers")
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, scope
        # the scope axis is recorded by its index in the *parent's* iteration variables
        self.schedule.trace.append(Step("compute_at", self.name, (
            ("stage", parent.name), ("iv", parent._index_of(scope), scope.name))))


def thread_axis(dom=None, tag: str = "", name: str = "") -> IterVar:
    """A GPU hardware index to ``bind`` loops to (TVM's ``te.thread_axis``).

    ``thread_axis("threadIdx.x")`` or ``thread_axis((0, 64), "threadIdx.x")``; ``tag`` is
    one of ``THREAD_TAGS``.

    Raises
    ------
    ScheduleError
        For an unknown tag.
    """
    if isinstance(dom, str):
        dom, tag = None, dom if not tag else tag
    if tag not in THREAD_TAGS:
        raise ScheduleError(format_error("thread_axis", f"unknown thread tag {tag!r}",
                                         f"one of {THREAD_TAGS}"))
    rng = None
    if dom is not None:
        lo, hi = dom
        rng = Range(int(lo), int(hi) - int(lo))
    return IterVar(Var("int32", name or tag), rng, "thread", tag)
