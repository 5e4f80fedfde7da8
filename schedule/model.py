"""The polyhedral model of a schedule: statements, domains, accesses, loop nests.

``build_model(sch, args)`` turns a schedule into:

* one :class:`StagePlan` per compute stage that is not inlined, holding the stage's body
  after ``compute_inline`` substitution and the affine value of each of its loops (the
  stage's *loop map*: split is ``x -> (floor(x/f), x mod f)``, fuse is
  ``(a, b) -> a*E_b + b``);
* one to three :class:`PolyStmt` per plan (``compute``, or ``init`` + ``update`` for a
  reduction, + ``round`` for one that accumulates in a wider dtype) with its isl
  iteration domain, loop values and access relations;
* the loop *nest*: a tree of :class:`LoopNode` mirroring the attach tree, from which the
  isl schedule tree is assembled (``tree.py``).

A reduction that accumulates in a wider dtype than its own (float16 sums in float32,
:mod:`polytile.te.dtype`) gets an accumulator buffer ``acc`` of that dtype: ``init`` and
``update`` work on ``acc``, and a third statement ``round`` stores ``acc`` rounded to the
stage's dtype. ``round`` has the loops of ``init`` and runs right after the reduction
loops, as ``init`` runs right before them, so every schedule (reduce loops outermost,
compute_at, GPU kernels) rounds each element exactly once, after its last update. ``acc``
holds what one iteration of the loops around the reduction loops writes (a register when
they are all spatial loops; see ``attach._accumulator``).

An attached stage (``compute_at``) runs, for each value ``p`` of its attach *prefix* (the
loops that enclose it), exactly the region ``x`` its consumers read there: the image of
their accesses under the reversed prefix map (Tiramisu's ``compute_needed_and_produced``).
As in TVM, its loops iterate over that region *relative to its origin*:
``y = x - lo(p)``, ``0 <= y < extent`` (the region's bounding box), which is also the
index into its buffer; a strided region is compacted, ``y = (x - lo(p)) / stride``
(``attach.py``). The record types live in :mod:`.polymodel`. A ``shared`` buffer is relaxed over thread indices: its region is
the union over the threads of a block. Other buffers computed inside ``vthread`` loops get
a leading dimension per such loop: a copy per virtual thread.

On GPUs (``padded=True``) every statement iterates over the full boxes of its loops, and
the exact domain becomes a guard inside the statement, so that loop bounds are uniform
across threads and barriers are never divergent (TVM's behaviour). Design notes:
``shared/isl/NOTES.md`` §1, §3.2.
"""

from __future__ import annotations

import dataclasses

import islpy as isl

from polytile.errors import InternalError, fail
from polytile.te import symbolic as sym
from polytile.te.depth import check_depth
from polytile.te.expr import And, Expr, Not, Or, Reduce, Select, TensorRead, Var
from polytile.te.tensor import ComputeOp, PlaceholderOp, Tensor
from polytile.te.visitor import ExprMutator, ExprVisitor, substitute

from . import isl_util as iu
from .attach import accesses, check_scope, make_stmts, relax_like_readers, set_prefix
from .layout import physical_shape
from .kinds import LoopKind, ThreadTag
from .loop_ir import Buffer
from .polymodel import LoopNode, Model, PolyStmt, ReadInfo, StagePlan
from .schedule import Schedule
from .relations import symbolic_fuse, symbolic_split
from .stage import Stage


# inlining -----------------------------------------------------------------------------


class _Inline(ExprMutator):
    """Substitutes inlined producers. Reads of one inlined tensor at structurally equal
    indices become one shared body (``B[i] * B[i]`` inlines ``B``'s body once, not twice),
    so a chain of inlined stages each reading its producer twice stays linear in size."""

    def __init__(self, inlined: set, stage_of: dict):
        self.inlined = inlined
        self.stage_of = stage_of
        self.reads: dict = {}    # (tensor, index keys) -> (tensor, inlined body)
        self.keys: dict = {}     # id(index expression) -> (expression, structural key)

    def _key(self, e: Expr):
        hit = self.keys.get(id(e))
        if hit is not None:
            return hit[1]
        if isinstance(e, Var):
            k = ("var", id(e))
        else:
            parts = [type(e).__name__]
            for f in dataclasses.fields(e):
                v = getattr(e, f.name)
                if isinstance(v, Expr):
                    parts.append(self._key(v))
                elif isinstance(v, tuple):
                    parts.append(tuple(self._key(x) if isinstance(x, Expr) else ("v", id(x))
                                       for x in v))
                elif isinstance(v, (int, float, str, bool)) or v is None:
                    parts.append((type(v).__name__, v))
                else:
                    parts.append(("id", id(v)))
            k = tuple(parts)
        self.keys[id(e)] = (e, k)
        return k

    def visit_TensorRead(self, r: TensorRead):
        idx = tuple(self.visit(i) for i in r.indices)
        st = self.stage_of.get(id(r.tensor.op))
        if st is not None and id(st) in self.inlined:
            key = (id(r.tensor), tuple(self._key(i) for i in idx))
            hit = self.reads.get(key)
            if hit is None:
                # the producer's own body at these indices, its producers inlined in turn
                # (through this walker's memo: each producer once per distinct index)
                body = substitute(st.op.body[r.tensor.value_index],
                                  {iv.var: i for iv, i in zip(st.op.axis, idx)})
                hit = self.reads[key] = (r.tensor, self.visit(body))
            return hit[1]
        if any(a is not b for a, b in zip(idx, r.indices)):
            return TensorRead(r.dtype, r.tensor, idx)
        return r


def inline_bodies(sch: Schedule, stage_of: dict) -> dict:
    """Bodies of every compute stage that is not inlined itself (by ``id(stage)``, a tuple:
    one per output) with
    inlined producers substituted (TVM's ``compute_inline``: a pure DSL rewrite before any
    polyhedral analysis)."""
    inlined = {id(st) for st in sch.stages if st.attach_type == "inline"}
    bodies: dict = {}
    for st in sch.stages:
        if isinstance(st.op, ComputeOp) and id(st) not in inlined:
            inl = _Inline(inlined, stage_of)
            bodies[id(st)] = tuple(inl.visit(b) for b in st.op.body)
    return bodies


# reads ----------------------------------------------------------------------------------


class _Reads(ExprVisitor):
    def __init__(self, names: dict, stage_of: dict):
        self.names = names
        self.stage_of = stage_of
        self.guards: list[Expr] = []
        self.out: list[ReadInfo] = []
        self.memo: dict = {}     # condition texts: guards of a long and-chain share prefixes
        self.in_init = False

    def memo_key(self, e):
        # a read shared under other guards is another access (its own guard)
        return (id(e), self.in_init) + tuple(id(g) for g in self.guards)

    def _guard(self) -> str | None:
        parts = []
        for g in self.guards:
            s = iu.condition_str(g, self.names, memo=self.memo)
            if s is None:
                return None
            parts.append(s)
        return " and ".join(parts)

    def visit_TensorRead(self, r: TensorRead):
        idx = [iu.affine_str(i, self.names) for i in r.indices]
        src = self.stage_of.get(id(r.tensor.op))
        self.out.append(ReadInfo(r, src, None if any(i is None for i in idx) else idx,
                                 self._guard(), self.in_init))
        for i in r.indices:
            self.visit(i)

    def visit_Select(self, e: Select):
        self.visit(e.cond)
        self.guards.append(e.cond)
        self.visit(e.true_value)
        self.guards[-1] = Not("bool", e.cond)
        self.visit(e.false_value)
        self.guards.pop()

    # ``and``/``or`` short-circuit in every backend (the interpreter, LLVM's lazy operands,
    # C's ``&&``/``||``): reads on the right run only where the left decides nothing, so a
    # where= such as rfactor's ``range guard and A[k] > 0`` reads A only inside the range
    def visit_And(self, e: And):
        self.visit(e.a)
        self.guards.append(e.a)
        self.visit(e.b)
        self.guards.pop()

    def visit_Or(self, e: Or):
        self.visit(e.a)
        self.guards.append(Not("bool", e.a))
        self.visit(e.b)
        self.guards.pop()

    def visit_Reduce(self, e: Reduce):
        if e.condition is not None:
            self.visit(e.condition)
            self.guards.append(e.condition)
        self.visit(e.source)
        if e.condition is not None:
            self.guards.pop()
        if e.init is not None:
            self.in_init = True
            self.visit(e.init)
            self.in_init = False


# building the model ------------------------------------------------------------------------


def _stage_index(sch: Schedule) -> dict:
    return {id(op): st for op, st in sch.stage_map.items()}


def _unique_names(sch: Schedule) -> dict:
    names: dict = {}
    used: set[str] = set()
    for st in sch.stages:
        n, k = st.name, 1
        while n in used:
            n, k = f"{st.name}_{k}", k + 1
        used.add(n)
        names[id(st)] = n
    return names


def _params(sch: Schedule, args, stage_of: dict, names: dict) -> tuple[dict, list]:
    if args is None:
        fail("lower", "args is missing", "pass the list of input and output tensors, e.g. "
              "[A, B, C]")
    buffers: dict = {}
    params: list = []
    outs: dict = {}       # (Stage, value_index) -> Buffer of every tensor in args
    for a in args:
        if isinstance(a, Tensor):
            st = stage_of.get(id(a.op))
            if st is None and isinstance(a.op, PlaceholderOp):
                # an input the computation does not read: an unused parameter, as in TVM
                st = stage_of[id(a.op)] = Stage(a.op, sch)
                taken = set(names.values())
                names[id(st)] = a.name if a.name not in taken else f"{a.name}_unused"
            if st is None:
                fail("lower", f"tensor {a.name!r} in args is not part of the schedule",
                      "pass tensors of this computation")
            k = a.value_index
            if (st, k) in outs:
                fail("lower", f"tensor {_tname(a)!r} appears twice in args")
            if st.attach_type == "inline":
                fail("lower", f"tensor {a.name!r} in args is inlined (compute_inline)",
                      "an argument needs storage: do not inline it",
                      hint=f"leave {a.name!r} out of args (TVM's schedule primitives "
                      "tutorial lowers it there and leaves its array unwritten), or "
                      f"s[{a.name}].compute_at(...) / compute_root() to fill it")
            b = Buffer(_out_name(names[id(st)], a.op, k),
                       physical_shape(st.layouts, a.shape), a.dtype, "global")
            outs[(st, k)] = b
            if k == 0:
                buffers[st] = b
            params.append(b)
        elif isinstance(a, Var):
            params.append(a)
        else:
            fail("lower", f"argument {a!r} is neither a tensor nor a te.var",
                  "pass tensors (placeholders and computes) and scalar te.var")
    for op in sch.outputs:
        st = sch.stage_map[op]
        if not any((st, k) in outs for k in range(op.num_outputs)):
            fail("lower", f"output {op.name!r} of the schedule is not in args",
                  "add it to args")
    return buffers, params, outs


def _out_name(name: str, op, k: int) -> str:
    """The buffer name of output ``k``: the stage's name, ``name.v<k>`` when it has several
    outputs (TVM's)."""
    return f"{name}.v{k}" if op.num_outputs > 1 else name


def _tname(t: Tensor) -> str:
    return _out_name(t.name, t.op, t.value_index)


def build_model(sch: Schedule, args, *, padded: bool = False) -> Model:
    """Build the polyhedral model of ``sch`` with function arguments ``args``.

    ``padded`` selects GPU-style uniform loops (see the module docstring).

    Raises
    ------
    ScheduleError
        For argument lists that do not match the schedule, attaches whose consumers are
        not inside the attach loop, or reads out of bounds.
    """
    stage_of = _stage_index(sch)
    names = _unique_names(sch)
    bodies = inline_bodies(sch, stage_of)
    for st in sch.stages:
        for body, orig in zip(bodies.get(id(st), ()), getattr(st.op, "body", ())):
            if st.attach_type != "inline" and body is not orig:
                # inlining adds the depth of a producer to its consumer's
                check_depth(body, "lower", st.name, " after compute_inline of its producers")
    buffers, params, outs = _params(sch, args, stage_of, names)
    plans: list[StagePlan] = []
    plan_of: dict = {}
    for st in sch.stages:
        if not isinstance(st.op, ComputeOp) or st.attach_type == "inline":
            continue
        plan = _make_plan(st, len(plans), bodies[id(st)], names, outs, stage_of)
        plans.append(plan)
        plan_of[id(st)] = plan
    _check_inputs(plans, buffers)
    check_definitions(sch, stage_of)
    consumers = _consumers(plans, plan_of)
    for p in plans:
        st = p.stage
        if st.attach_type == "scope":
            target = st.attach_stage
            if target.attach_type == "inline":
                fail("compute_at", f"stage {p.name!r} is attached to {target.name!r}, which "
                      f"is inlined", "attach to a stage that has loops")
            tp = plan_of[id(target)]
            p.attach = (tp, tp.leaves.index(st.attach_ivar))
    # consumers before producers: an attach target (a consumer) precedes the stages attached
    # to it, and a region needs the domains of all the stage's consumers
    order = list(reversed(plans))
    for p in order:
        set_prefix(p, padded)
        if padded:
            relax_like_readers(p, consumers[id(p)])
    for p in plans:
        check_scope(p, consumers[id(p)])
    for p in order:
        make_stmts(p, consumers[id(p)], padded)
    nest, loops = _build_nest(plans)
    for p in plans:
        buffers[p.stage] = p.buffer
        for k, b in enumerate(p.outs):
            outs[(p.stage, k)] = b
    for p in plans:
        accesses(p, plan_of, buffers)
    stmts = {s.name: s for p in plans for s in p.stmts}
    return Model(plans, stmts, nest, loops, buffers, params, stage_of, padded, outs=outs)


def _make_plan(st: Stage, index: int, bodies: tuple, names: dict, outs: dict,
               stage_of: dict) -> StagePlan:
    op = st.op
    axis_vars = [iv.var for iv in op.axis]
    reduce_vars = [iv.var for iv in op.reduce_axis]
    leaves, strips = _strip_leaves(st)
    r = next((k for k, iv in enumerate(leaves) if iv.iter_type == "reduce"), len(leaves))
    bufs = []
    for k, t in enumerate(op.outputs):
        bufs.append(outs.get((st, k)) or Buffer(
            _out_name(names[id(st)], op, k), physical_shape(st.layouts, t.shape), t.dtype,
            "intermediate"))
    var_names = {v: f"d{k}" for k, v in enumerate(axis_vars + reduce_vars)}
    rd = _Reads(var_names, stage_of)
    for k, body in enumerate(bodies):
        if k and isinstance(body, Reduce):
            # the elements of a tuple reduction share their where= (read once)
            rd.visit(body.source)
            if body.init is not None:
                rd.in_init = True
                rd.visit(body.init)
                rd.in_init = False
        else:
            rd.visit(body)
    body = bodies[0]
    plan = StagePlan(st, index, body, axis_vars, reduce_vars, leaves, r, bufs[0], rd.out,
                     scope=st.scope or "global", bodies=tuple(bodies), outs=bufs,
                     strips=strips)
    if isinstance(body, Reduce) and body.condition is not None:
        # an affine where= restricts the update's domain: isl then emits tight loops
        plan.where = iu.condition_str(body.condition, var_names)
    return plan


def _strip_leaves(st: Stage) -> tuple[list, dict]:
    """The loops of ``st`` as isl sees them: the two loops of each split by a symbolic
    factor become one loop over its parent (strip-mined after AST generation), and
    ``{parent: Split}`` for them.

    Raises
    ------
    ScheduleError
        When the two loops are not adjacent, a stage is computed at one of them, or the
        stage is itself computed at another stage's loop."""
    leaves = list(st.leaf_iter_vars)
    strips: dict = {}
    for rel in st.relations:
        if not symbolic_split(rel):
            continue
        if st.attach_type == "scope":
            fail("split", f"stage {st.name!r} splits {rel.parent.name!r} by the symbolic "
                 f"factor {rel.sym} and is computed at {st.attach_stage.name!r}",
                 "symbolic split factors in stages computed at the root",
                 hint="split by a constant factor, or compute_root() the stage")
        k = leaves.index(rel.outer)
        if k + 1 >= len(leaves) or leaves[k + 1] is not rel.inner:
            fail("reorder", f"stage {st.name!r}: the loops {rel.outer.name!r} and "
                 f"{rel.inner.name!r} of a split by the symbolic factor {rel.sym} are not "
                 f"adjacent in [{', '.join(v.name for v in leaves)}]", "the two loops of a "
                 "symbolic split next to each other, outer first (isl cannot tile by a "
                 "parameter: they are strip-mined from one loop)",
                 hint="split by a constant factor to tile")
        for other in st.schedule.stages:
            if other.attach_stage is st and other.attach_ivar in (rel.outer, rel.inner):
                fail("compute_at", f"stage {other.name!r} is computed at "
                     f"{other.attach_ivar.name!r} of {st.name!r}, a loop of a split by the "
                     f"symbolic factor {rel.sym}", "compute_at a loop of constant extent "
                     "or one outside the symbolic split")
        pair = [st.annotations.get(rel.outer), st.annotations.get(rel.inner)]
        if any(isinstance(a, ThreadTag) for a in pair) and not (
                all(isinstance(a, ThreadTag) for a in pair) and pair[0].is_block
                and pair[1].is_thread and pair[0].value[-1] == pair[1].value[-1]):
            fail("bind", f"the loops {rel.outer.name!r} and {rel.inner.name!r} of stage "
                 f"{st.name!r} (a split by the symbolic factor {rel.sym}) are bound to "
                 f"{[a.value if isinstance(a, ThreadTag) else None for a in pair]}",
                 "the outer loop to blockIdx.d and the inner one to threadIdx.d of the same "
                 "dimension d (a block size given at launch), or no GPU index",
                 hint="split by a constant factor to bind other combinations")
        for iv in (rel.outer, rel.inner):
            ann = st.annotations.get(iv)
            if ann is not None and ann is not LoopKind.PARALLEL and not (
                    isinstance(ann, ThreadTag) and ann.is_hardware):
                fail(getattr(ann, "primitive", "bind"),
                     f"loop {iv.name!r} of stage {st.name!r} has the symbolic extent "
                     f"{rel.sym if iv is rel.inner else iv.dom.extent}", "a loop of constant "
                     "extent (only parallel, or the GPU index pair, for a symbolic split)")
        leaves[k:k + 2] = [rel.parent]
        strips[rel.parent] = rel
    # fuses of symbolic extent, last first: each fused loop is its two loops again
    for rel in reversed(st.relations):
        if not symbolic_fuse(rel):
            continue
        ann = st.annotations.get(rel.fused)
        if ann is not None and ann is not LoopKind.PARALLEL:
            fail(getattr(ann, "primitive", "bind"), f"loop {rel.fused.name!r} of stage "
                 f"{st.name!r} fuses a loop of symbolic extent {rel.inner.dom.extent}",
                 "parallel or no annotation on such a fused loop (its index is not affine: "
                 "the loops are coalesced after isl's code generation)",
                 hint="split the inner axis by a constant factor and fuse that part")
        for other in st.schedule.stages:
            if other.attach_stage is st and other.attach_ivar is rel.fused:
                fail("compute_at", f"stage {other.name!r} is computed at {rel.fused.name!r} "
                     f"of {st.name!r}, a fuse of a loop of symbolic extent", "compute_at a "
                     "loop of constant extent or one outside the fused loop")
        k = leaves.index(rel.fused)
        leaves[k:k + 1] = [rel.outer, rel.inner]
    return leaves, strips


def _check_inputs(plans: list[StagePlan], buffers: dict) -> None:
    for p in plans:
        for rd in p.reads:
            t = rd.node.tensor
            if rd.source is None:
                fail("lower", f"stage {p.name!r} reads {t.name!r}, which is not part of the "
                      f"schedule")
            if isinstance(rd.source.op, PlaceholderOp) and rd.source not in buffers:
                fail("lower", f"input {t.name!r} is read by stage {p.name!r} but is not in "
                      f"args", "add it to args")


def _consumers(plans: list[StagePlan], plan_of: dict) -> dict:
    out: dict = {id(p): [] for p in plans}
    for c in plans:
        for rd in c.reads:
            prod = plan_of.get(id(rd.source))
            # a scan reads itself: not a consumer whose reads size an attached region
            if prod is not None and prod is not c and not any(x is c for x in out[id(prod)]):
                out[id(prod)].append(c)
    return out


def check_definitions(sch: Schedule, stage_of: dict) -> None:
    """Every affine read of every compute definition must stay inside its tensor.

    Runs once per ``lower`` on the definitions as written, before ``compute_inline``
    substitutes bodies, and independent of any other schedule primitive: a read that the
    schedule would never execute (its consumer is inlined, attached to a smaller region,
    or split with a guard) is still refused. A read guarded by ``te.if_then_else``, a
    reduction's ``where=`` or the left operand of a short-circuit ``and``/``or`` is checked
    only where its guard lets it run; reads whose index or guard isl cannot express are
    left to the run-time checks.

    Raises
    ------
    ScheduleError
        Naming the stage, the read, the range its index takes and the tensor's extent,
        with a first point outside.
    """
    for st in sch.stages:
        if isinstance(st.op, ComputeOp):
            _check_definition(st, stage_of)


def _check_definition(st: Stage, stage_of: dict) -> None:
    op = st.op
    ivs = list(op.axis) + list(op.reduce_axis)
    names = [f"d{k}" for k in range(len(ivs))]
    rd = _Reads({iv.var: n for iv, n in zip(ivs, names)}, stage_of)
    for b in op.body:
        rd.visit(b)
    space = iu.tuple_str("AX", names)
    dom = iu.restrict(iu.Set(f"{{ {space} : "
                  f"{iu.box_str(names, [(iv.dom.min, iv.dom.extent) for iv in ivs])} }}"))
    for r in rd.out:
        if r.indices is None or r.guard is None:
            continue  # not affine, or guarded by a condition isl cannot see
        d = dom.intersect(iu.Set(f"{{ {space} : {r.guard} }}")) if r.guard else dom
        t = r.node.tensor
        acc = iu.Map(f"{{ {space} -> T[{', '.join(r.indices)}] }}").intersect_domain(d)
        outside = acc.subtract_range(iu.tensor_box(t, "T"))
        if outside.is_empty():
            continue
        # the first iteration (lexicographically) that reads outside: a stable example
        first = outside.wrap().lexmin().sample_point()
        coords = iu.point_coords(first, len(names) + t.ndim)
        at = ", ".join(f"{iv.var.name}={c}" for iv, c in zip(ivs, coords))
        at += _param_values(first)
        fail("lower", f"stage {op.name!r} reads {t.name}"
              f"[{', '.join(map(str, coords[len(names):]))}] outside its shape {t.shape} "
              f"(at {at})", "every read must stay inside its tensor",
              Read=_read_range(r, acc.range(), t),
              hint="guard padded reads with te.if_then_else")


def _read_range(r: ReadInfo, values: isl.Set, t: Tensor) -> str:
    """``K[k] for k in [0, 63], but K has extent 3``: the first dimension of read ``r``
    whose index range (``values``, a set of index tuples) leaves the tensor."""
    for q, ext in enumerate(t.shape):
        lo, hi = values.dim_min_val(q), values.dim_max_val(q)
        if not (lo.is_int() and hi.is_int() and sym.is_static(ext)):
            continue
        lo, hi = lo.to_python(), hi.to_python()
        if lo >= 0 and hi < ext:
            continue
        where = f" (dimension {q})" if t.ndim > 1 else ""
        return (f"{r.node} for {r.node.indices[q]} in [{lo}, {hi}]{where}, but {t.name} has "
                f"extent {ext}" + (" there" if where else ""))
    return str(r.node)


# the nest ---------------------------------------------------------------------------------


def _build_nest(plans: list[StagePlan]) -> tuple[list, dict]:
    attached: dict = {}
    for p in plans:
        if p.attach is not None:
            attached.setdefault((id(p.attach[0]), p.attach[1]), []).append(p)
    loops: dict = {}

    def new_loop(plan, pos, init_only=False):
        node = LoopNode(len(loops), plan, pos, init_only=init_only)
        loops[node.key] = node
        return node

    def side_branch(p: StagePlan, st: PolyStmt) -> list:
        """The loops of ``init`` (before the reduction loops) or ``round`` (after them)."""
        positions = p.stmt_loops(st.kind)[p.r:]
        nodes: list = [st]
        for pos in reversed(positions):
            n = new_loop(p, pos, init_only=True)
            n.children = nodes
            nodes = [n]
        return nodes

    def chain(p: StagePlan, pos: int) -> list:
        if pos == len(p.leaves):
            return [p.main_stmt()]
        node = new_loop(p, pos)
        kids: list = []
        for q in attached.get((id(p), pos), []):
            kids += stage_nodes(q)
        if p.is_reduction and pos + 1 == p.r:
            kids += side_branch(p, p.stmts[0])
        kids += chain(p, pos + 1)
        if p.is_reduction and pos + 1 == p.r and len(p.stmts) == 3:
            kids += side_branch(p, p.stmts[2])
        node.children = kids
        return [node]

    def stage_nodes(p: StagePlan) -> list:
        out: list = []
        if p.is_reduction and p.r == 0:
            out += side_branch(p, p.stmts[0])
        out += chain(p, 0)
        if p.is_reduction and p.r == 0 and len(p.stmts) == 3:
            out += side_branch(p, p.stmts[2])
        return out

    nest: list = []
    for p in plans:
        if p.attach is None:
            nest += stage_nodes(p)
    _fill_loop_stmts(nest, 0)
    return nest, loops


def _fill_loop_stmts(nodes: list, depth: int) -> list:
    """Set ``LoopNode.stmts`` to every statement below the loop with its value there (the
    loop's own affine value for the loop's stage, the statement's prefix coordinate for
    stages attached below; statements that do not depend on the loop are left out).
    Returns the statements of ``nodes``."""
    found: list = []
    for n in nodes:
        if isinstance(n, PolyStmt):
            found.append(n)
            continue
        below = _fill_loop_stmts(n.children, depth + 1)
        for st in below:
            v = n.plan.leaf_aff[n.iter_var] if st.plan is n.plan else st.sched[depth]
            if v is not None:
                n.stmts[st] = v
            elif n.binding is None:
                raise InternalError(f"statement {st.name} has no value for loop "
                                    f"{n.iter_var.name} of {n.plan.name}")
        found += below
    return found




def _param_values(p: isl.Point) -> str:
    """`` with n=3`` for the symbolic sizes of an example point (empty without them)."""
    sp = p.get_space()
    vals = []
    for k in range(sp.dim(isl.dim_type.param)):
        v = iu.param_var(sp.get_dim_name(isl.dim_type.param, k))
        if v is not None:
            vals.append(f"{v.name}={p.get_coordinate_val(isl.dim_type.param, k).to_python()}")
    return f" with {', '.join(vals)}" if vals else ""
