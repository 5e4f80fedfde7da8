"""GPU kernels: which loops become which hardware indices, launch shapes, device limits.

Every root stage (with the stages attached inside it) is one kernel. Its loops bound to
``blockIdx.*``/``threadIdx.*`` are isl parameters (see ``tree.py``); the launch extent of
an index is the extent of the loops bound to it, which must agree across the stages of a
kernel. The limits checked here (threads per block, block and grid extents, shared memory)
come from the target's :class:`~polytile.backend.DeviceLimits`; a limit of 0 is no limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from polytile.backend import DeviceLimits
from polytile.errors import LoweringError, ScheduleError, fail, format_error
from polytile.te import dtype as dt
from polytile.te import symbolic as sym
from polytile.te.expr import Binary, Cast, Var
from polytile.te.tensor_intrin import EXTERN_KEY

from . import isl_util as iu
from .kinds import FRAGMENT_SCOPES, PARAM_SPACE, PARAMS
from .polymodel import LoopNode, Model, StagePlan


@dataclass(eq=False)
class Kernel:
    """One kernel: the nest nodes of one root stage and its launch shape."""

    plan: StagePlan
    nodes: list
    extents: dict            # tag -> extent
    #: blockIdx tag -> the symbolic factor f of a split bound to it and to the thread index
    #: of its dimension: the tag's isl parameter is the block's offset blockIdx * f
    offsets: dict = field(default_factory=dict)
    _vars: dict | None = None

    @property
    def grid(self) -> tuple:
        return tuple(self.extents.get(f"blockIdx.{a}", 1) for a in "xyz")

    @property
    def block(self) -> tuple:
        return tuple(self.extents.get(f"threadIdx.{a}", 1) for a in "xyz")

    def context(self) -> str:
        """The isl parameter context: each index within its launch extent (a block offset
        of a symbolic split, see :attr:`offsets`, only ``>= 0``: the domain bounds it)."""
        cons = [f"0 <= {PARAMS[t]}" if t in self.offsets else
                f"0 <= {PARAMS[t]} < {iu.num(self.extents.get(t, 1))}" for t in PARAMS]
        return iu.pfx(f"{PARAM_SPACE} -> {{ : {' and '.join(cons)} }}")

    def thread_vars(self) -> dict:
        """isl parameter name -> loop-IR variable of the hardware index (the same
        variables at every call)."""
        if self._vars is None:
            self._vars = {PARAMS[t]: Var("int64", t.value) for t in PARAMS}
        return self._vars

    def index_env(self) -> dict:
        """isl parameter name -> its loop-IR value: the hardware index, or for a block
        offset (:attr:`offsets`) ``blockIdx * f``."""
        env = dict(self.thread_vars())
        for t, f in self.offsets.items():
            fx = f if f.dtype == "int64" else Cast("int64", f)
            env[PARAMS[t]] = Binary("int64", "mul", env[PARAMS[t]], fx)
        return env


def kernels(model: Model, limits: DeviceLimits) -> list[Kernel]:
    """Split the program into kernels and compute their launch shapes, checked against
    the device's ``limits``.

    Raises
    ------
    ScheduleError
        For a root stage with no bound loop (but a 0-rank stage runs as one thread of
        one block), ``blockIdx`` bound inside an attached stage,
        extents that disagree within a kernel, or launch shapes beyond the device limits.
    """
    groups: dict = {}
    for n in model.nest:
        groups.setdefault(id(n.plan), (n.plan, []))[1].append(n)
    out = []
    for plan, nodes in groups.values():
        bound: dict = {}
        for n in nodes:
            _collect(n, bound)
        if not bound and not _is_scalar(plan):
            raise ScheduleError(format_error(
                "build", f"stage {plan.name!r} has no loop bound to a GPU index",
                "bind its loops with s[T].bind(axis, te.thread_axis('blockIdx.x')) and "
                "'threadIdx.x'", hint="every stage computed at the root is one CUDA kernel"))
        offsets: dict = {}
        for n in nodes:
            _pairs(n, offsets)
        inside = [q for q in model.plans if q.attach is not None and _root(q) is plan]
        if offsets and inside:
            fail("compute_at", f"stage {inside[0].name!r} is computed inside the kernel of "
                 f"stage {plan.name!r}, whose block size is a symbolic split factor",
                 "stages computed at the root in a kernel whose block size is given at launch",
                 hint=f"compute_root() {inside[0].name!r}, or split {plan.name!r} by a "
                 "constant factor")
        extents = {}
        for tag, uses in bound.items():
            exts = {_key(e): e for _, e in uses}
            if len(exts) > 1:
                desc = ", ".join(f"{sym.text(e)} (stage {p.name!r})" for p, e in uses)
                fail("bind", f"thread axis {tag!r} is bound to loops of different extents: {desc}",
                      "one extent per kernel: split the loops to the same size")
            extents[tag] = next(iter(exts.values()))
        _check_limits(plan, extents, limits)
        out.append(Kernel(plan, nodes, extents, offsets))
    return out


def _is_scalar(plan: StagePlan) -> bool:
    """A 0-rank stage has no loop to bind, nor has a ``te.extern`` stage (one call of the
    user's code over whole buffers): its kernel runs as one thread of one block."""
    return not getattr(plan.stage.op, "axis", None) or is_extern(plan.stage.op)


def is_extern(op) -> bool:
    """True for the operation of a ``te.extern``."""
    return EXTERN_KEY in getattr(op, "attrs", {})


def _key(e) -> str:
    """An extent as text, to compare extents (isl's form where it is affine)."""
    return iu.num(e) if sym.is_static(e) or _affine(e) else str(sym.as_expr(e))


def _affine(e) -> bool:
    try:
        iu.num(e)
    except LoweringError:
        return False
    return True


def _pairs(n, offsets: dict) -> None:
    """The block indices of symbolic splits bound to (blockIdx.d, threadIdx.d) (see
    :attr:`Kernel.offsets`); such a pair must be the only use of both indices."""
    if not isinstance(n, LoopNode):
        return
    pair = n.index_pair
    if pair:
        rel = n.plan.strips[n.iter_var]
        if pair[0] in offsets and offsets[pair[0]] is not rel.sym:
            fail("bind", f"{pair[0].value!r} is bound to two splits by symbolic factors in "
                 f"the kernel of stage {n.plan.name!r}", "one symbolic split per block index")
        offsets[pair[0]] = sym.as_expr(rel.sym)
    for c in n.children:
        _pairs(c, offsets)


def _collect(n, bound: dict) -> None:
    if not isinstance(n, LoopNode):
        return
    tag = n.binding
    pair = n.index_pair
    if pair:
        if n.plan.attach is not None:
            fail("bind", f"loop {n.iter_var.name!r} of stage {n.plan.name!r} (a split by a "
                 f"symbolic factor) is bound to {list(t.value for t in pair)} inside another "
                 "stage", "such a split bound to GPU indices in a stage computed at the root")
        rel = n.plan.strips[n.iter_var]
        for t, ext in ((pair[0], rel.outer.dom.extent), (pair[1], rel.sym)):
            uses = bound.setdefault(t, [])
            if not any(p is n.plan and _key(e) == _key(ext) for p, e in uses):
                uses.append((n.plan, ext))
    elif tag in PARAMS:
        if n.plan.attach is not None and tag.is_block:
            fail("bind", f"loop {n.iter_var.name!r} of stage {n.plan.name!r} is bound to {tag!r}, "
                  f"but the stage is computed inside another stage",
                  "bind blockIdx only in stages computed at the root")
        ext = n.plan.extent(n.iter_var)
        if not sym.is_static(ext) and not tag.is_block:
            fail("bind", f"loop {n.iter_var.name!r} of stage {n.plan.name!r} is bound to "
                 f"{tag.value!r} but has the symbolic extent {sym.text(ext)}", "a constant "
                 "extent for a thread index (the block size is fixed when the kernel is "
                 "compiled)", hint=f"split {n.iter_var.name!r} by a constant factor, bind "
                 "the inner loop to the thread index and the outer one to a block index")
        ext = sym.static(ext) if sym.is_static(ext) else ext
        declared = n.plan.stage.thread_extents.get(n.iter_var)
        if declared is not None and (not sym.is_static(ext) or declared != ext):
            fail("bind", f"loop {n.iter_var.name!r} of stage {n.plan.name!r} has extent {ext}, but it "
                  f"is bound to a {tag!r} axis created with extent {declared}",
                  "expected equal extents (the range of a thread axis is its launch size)",
                  hint=f"split the loop by {declared} first, or create "
                       f"te.thread_axis({tag!r}) without a range")
        uses = bound.setdefault(tag, [])
        if not any(p is n.plan and _key(e) == _key(ext) for p, e in uses):
            uses.append((n.plan, ext))
    for c in n.children:
        _collect(c, bound)


def _check_limits(plan: StagePlan, extents: dict, limits: DeviceLimits) -> None:
    threads = 1
    for k, a in enumerate("xyz"):
        t = extents.get(f"threadIdx.{a}", 1)
        b = extents.get(f"blockIdx.{a}", 1)
        if not sym.is_static(t):
            return   # a block size given at launch (a symbolic split): checked there
        threads *= t
        if not sym.is_static(b):
            continue   # a symbolic grid extent: checked at each launch
        top_t, top_b = limits.max_block_dim[k], limits.max_grid_dim[k]
        if top_t and t > top_t:
            fail("bind", f"threadIdx.{a} of the kernel of stage {plan.name!r} has extent {t}",
                  f"at most {top_t}")
        if top_b and b > top_b:
            fail("bind", f"blockIdx.{a} of the kernel of stage {plan.name!r} has extent {b}",
                  f"at most {top_b}")
    top = limits.max_threads_per_block
    if top and threads > top:
        fail("bind", f"the kernel of stage {plan.name!r} has {threads} threads per block",
              f"at most {top}")


def pipeline_stages(stage) -> int:
    """How many slots the buffer of ``stage`` gets: the ``stages`` of a
    ``Stage.pipeline`` on the loop it is computed at, else 1."""
    if stage.attach_type != "scope" or stage.attach_stage is None:
        return 1
    for k, v in stage.attach_stage.pragmas.get(stage.attach_ivar, ()):
        if k == "software_pipeline":
            return v.stages
    return 1


def check_shared_memory(model: Model, kernel: Kernel, limits: DeviceLimits) -> None:
    """The shared buffers of one kernel must fit in the device's
    ``limits.shared_bytes_per_block``."""
    total = 0
    names = []
    pipelined = False
    for p in model.plans:
        if p.buffer.scope == "local" and _root(p) is kernel.plan and not all(
                sym.is_static(d) for d in p.buffer.shape):
            names_ = sorted({v.name for d in p.buffer.shape for v in sym.params_of(d)})
            fail("compute_at", f"the local buffer of stage {p.name!r} has the symbolic "
                 f"shape {[sym.text(d) for d in p.buffer.shape]} (parameters "
                 f"{', '.join(names_)})", "a constant size per thread (registers)",
                 hint="compute the stage inside a loop tiled by a constant factor, or "
                 "set_scope('shared')")
        acc = p.acc
        if (acc is not None and acc.scope == "local" and _root(p) is kernel.plan
                and not all(sym.is_static(d) for d in acc.shape)):
            # (a float16/bfloat16 reduction's float32 accumulator holds what one thread's
            # spatial loops inside its reduction loops write)
            names_ = sorted({v.name for d in acc.shape for v in sym.params_of(d)})
            fail("reorder", f"the {acc.dtype} accumulator of stage {p.name!r} holds the "
                 f"elements its spatial loops inside the reduction loops write, of the "
                 f"symbolic shape {[sym.text(d) for d in acc.shape]} (parameters "
                 f"{', '.join(names_)})", "a constant size per thread (registers)",
                 hint="keep the reduction loops inside the spatial loops of each thread, "
                 "or split those spatial loops by a constant factor")
        if p.buffer.scope == "shared" and _root(p) is kernel.plan:
            shapes = [b.shape for b in p.outs] + ([p.acc.shape] if p.acc is not None else [])
            if not all(sym.is_static(d) for shp in shapes for d in shp):
                names.append(p.name)   # its size is known at launch, and checked there
                continue
            slots = pipeline_stages(p.stage)
            pipelined = pipelined or slots > 1
            total += slots * sum(b.size * dt.nbytes(b.dtype) for b in p.outs)
            if p.acc is not None:   # its wide accumulator
                total += p.acc.size * dt.nbytes(p.acc.dtype)
            names.append(p.name if slots == 1 else f"{p.name} x {slots} stages")
    top = limits.shared_bytes_per_block
    if pipelined and limits.shared_bytes_optin:
        top = limits.shared_bytes_optin
    if top and total > top:
        raise ScheduleError(format_error(
            "cache_read", f"the kernel of stage {kernel.plan.name!r} needs {total} bytes of "
            f"shared memory ({', '.join(names)})", f"at most {top} bytes",
            hint="use smaller tiles"))


def check_wavefronts(kernel: Kernel, limits: DeviceLimits) -> None:
    """Tensor intrinsics that touch a tensor-core fragment (WMMA, MFMA) are collective: the
    ``limits.warp_size`` lanes of a warp (CUDA, 32) or wavefront (AMD CDNA, 64) run each
    call together, the lanes being consecutive ``threadIdx.x`` values. So such a statement
    must not be inside a loop bound to ``threadIdx.x`` (the lanes would hold different
    tiles), and ``threadIdx.x`` must have a multiple of ``warp_size`` threads (else one
    warp would span several ``threadIdx.y`` rows, each expecting its own tile).

    Raises
    ------
    ScheduleError
        Naming the stage, the loop and the binding.
    """
    w = limits.warp_size
    collective = []
    warpgroup = []     # stages of Hopper warpgroup intrinsics: 4 warps run them together

    def walk(n, bound_x) -> None:
        if not isinstance(n, LoopNode):
            return
        if n.binding is not None and n.binding.value == "threadIdx.x":
            bound_x = n
        for st in n.stmts:
            if st.plan.tensorize is not None and any(
                    b is not None and b.scope in FRAGMENT_SCOPES
                    for b, _ in st.accesses.values()):
                if bound_x is not None:
                    fail("bind", f"stage {st.plan.name!r} calls a warp-collective tensor "
                         f"intrinsic inside loop {bound_x.iter_var.name!r} of stage "
                         f"{bound_x.plan.name!r}, which is bound to 'threadIdx.x': its "
                         f"{w} lanes would each hold a different tile",
                         "fragment stages outside loops bound to threadIdx.x (bind the tile "
                         "loops to threadIdx.y/z)")
                collective.append(st.plan)
                if any(b is not None and b.scope == "wgmma.accumulator"
                       for b, _ in st.accesses.values()):
                    warpgroup.append(st.plan)
        for c in n.children:
            walk(c, bound_x)

    for n in kernel.nodes:
        walk(n, None)
    tx = kernel.extents.get("threadIdx.x", 1)
    if warpgroup and (not isinstance(tx, int) or tx % (4 * w)):
        fail("bind", f"the kernel of stage {kernel.plan.name!r} has threadIdx.x extent {tx}, "
             f"but stage {warpgroup[0].name!r} calls a warpgroup intrinsic (wgmma) that the "
             f"{4 * w} threads of 4 consecutive warps run together",
             f"a threadIdx.x extent that is a multiple of {4 * w}",
             hint=f"split the loops bound to threadIdx.x by {4 * w}")
    if collective and w > 1 and (not isinstance(tx, int) or tx % w):
        fail("bind", f"the kernel of stage {kernel.plan.name!r} has threadIdx.x extent {tx}, "
             f"but stage {collective[0].name!r} calls a tensor intrinsic that the {w} lanes "
             f"of a {'wavefront' if w == 64 else 'warp'} run together",
             f"a threadIdx.x extent that is a multiple of {w}",
             hint=f"split the loops bound to threadIdx.x by {w}")


def check_store_predicate_threads(model: Model, kernel: Kernel) -> None:
    """A ``set_store_predicate`` condition must hold for some thread of the launch, or
    no thread would store the stage's elements."""
    from .isl_util import condition_str  # deferred: the model imports this module first

    for p in model.plans:
        st = p.stage
        if st.store_predicate is None or _root(p) is not kernel.plan:
            continue
        names = {v: t.param for v, t in st.store_predicate_tags.items()}
        cond = condition_str(st.store_predicate, names)
        s = iu.Set(f"{PARAM_SPACE} -> {{ : {cond} }}").intersect(
            isl.Set(kernel.context()))
        if s.is_empty():
            shape = ", ".join(f"{t}={n}" for t, n in sorted(kernel.extents.items()))
            raise ScheduleError(format_error(
                "set_store_predicate", f"stage {st.name!r} stores only where "
                f"{st.store_predicate}, which no thread of its kernel satisfies (launch "
                f"{shape})", "a condition that some thread of the launch meets",
                hint="tx.var == 0"))


def _root(p: StagePlan) -> StagePlan:
    while p.attach is not None:
        p = p.attach[0]
    return p
