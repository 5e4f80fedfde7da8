"""isl AST generation and its immediate conversion into polytile's loop IR.

The ``at_each_domain`` hook (the TC/PPCG pattern, ``shared/isl/NOTES.md`` §2.2) records, for
every statement instance the AST executes, its iteration coordinates and the index
expressions of its accesses as built by isl (pulled back through the schedule, so they are
simplified in terms of the loop iterators). Nothing isl outlives this module: the AST is
converted at once, and callback exceptions (which islpy would swallow) are re-raised.
"""

from __future__ import annotations

import islpy as isl

from polytile.errors import InternalError, LoweringError, fail
from polytile.te import dtype as dt
from polytile.te import symbolic as sym
from polytile.te.expr import (Binary, Cast, Cmp, Const, Expr, Not, Or, Reduce, Select,
                              TupleCommReducer, Var, logical_and)
from polytile.te.reduction import widened
from polytile.te.visitor import ExprMutator, substitute

from . import isl_util as iu
from .layout import apply_indices
from .loop_ir import (Assert, Buffer, For, IfThenElse, LetStmt, Load, Stmt, Store, Sync, seq)
from .ast_check import concrete_mismatches, mismatches
from .kinds import AutoUnrollPragma, LoopKind, for_pragmas, loop_kind
from .polymodel import LoopNode, Model, PolyStmt
from .tensorize import make_tensor_call
from .threads import barrier_plans, roles
from .tree import build_schedule, stmts_below

_INT_DIVS = ("floordiv", "floormod", "truncdiv", "truncmod")


class _Hook:
    def __init__(self, model: Model, guards: dict):
        self.model = model
        self.guards = guards              # statement name -> guard replacing PolyStmt.guard
        self.info: list = []
        self.guard_exprs: list = []       # isl AST of each call's guard, for validation
        self.errors: list = []
        self.placeholders: dict[str, Var] = {}
        # the text of an access -> its normal form: the reads and the store of an
        # elementwise statement are often one function (0.5 s each for fuzz cuda 7464)
        self.normal: dict[str, isl.PwMultiAff] = {}

    def normalized(self, pulled: isl.PwMultiAff) -> isl.PwMultiAff:
        """:func:`_normalized`, once per function whatever tensor it indexes."""
        out = isl.dim_type.out
        named = pulled.has_tuple_id(out)
        bare = pulled.reset_tuple_id(out) if named else pulled
        text = str(bare)
        if text not in self.normal:
            self.normal[text] = _normalized(bare, text)
        res = self.normal[text]
        return res.set_tuple_id(out, pulled.get_tuple_id(out)) if named else res

    def var_of(self, name: str) -> Var:
        pv = iu.param_var(name)
        if pv is not None:   # a symbolic size: the same variable everywhere
            return _to_index(pv)
        v = self.placeholders.get(name)
        if v is None:
            v = self.placeholders[name] = Var("int64", name)
        return v

    def __call__(self, node: isl.AstNode, build: isl.AstBuild) -> isl.AstNode:
        try:
            call = node.user_get_expr()
            name = call.get_op_arg(0).get_id().get_name()
            st = self.model.stmts[name]
            it_map = isl.PwMultiAff.from_map(
                isl.Map.from_union_map(build.get_schedule()).reverse())
            idx = {}
            cond = self.guards.get(st.name, st.guard)
            here = it_map.domain()
            runs = here if cond is None else cond.preimage_pw_multi_aff(it_map)
            for key, (_, pma) in st.accesses.items():
                pulled = _total(pma.pullback_pw_multi_aff(it_map), here, runs, st, key)
                pulled = self.normalized(pulled)
                acc = build.access_from_pw_multi_aff(pulled)
                idx[key] = tuple(iu.ast_expr(acc.get_op_arg(k), self.var_of)
                                 for k in range(1, acc.get_op_n_arg()))
            guard = gexpr = None
            if cond is not None:
                gexpr = build.expr_from_set(runs)
                guard = iu.ast_expr(gexpr, self.var_of)
            self.info.append((st, idx, guard))
            self.guard_exprs.append(gexpr)
            return node.set_annotation(isl.Id(f"U{len(self.info) - 1}"))
        except BaseException as exc:  # islpy swallows callback exceptions: keep it
            self.errors.append(exc)
            return node


def _normalized(pma: isl.PwMultiAff, text: str | None = None) -> isl.PwMultiAff:
    """``pma`` with its integer divisions in normal form (coefficients that the divisor
    divides taken out of the floor): a pullback leaves ``floor((256 k0 + k1) / 16) - 16
    k0`` as it is, which the AST build prints as a division of the whole sum per access
    (a packed operand blocked by 16 along k inside blocks of 256: ``k1 / 16`` is wanted,
    constant once ``k1`` is split by 16 and unrolled). Rebuilding the function from its
    graph normalizes it; only accesses that have a division are rebuilt. The rebuilt
    function is kept only where it is shorter: from the graph isl may also fold terms
    that are multiples of the divisor *into* a division (a grouped GPU GEMM's
    ``128 * (bx mod 8)`` became ``128 * ((bx + 8 tx + 16 i + ...) mod 8)``: equal, but
    no longer provably 16-byte aligned for ``cp.async``, and more index arithmetic).
    ``text``: ``str(pma)`` when the caller has it."""
    text = str(pma) if text is None else text
    if "floor" not in text and "mod" not in text:
        return pma
    rebuilt = isl.PwMultiAff.from_map(isl.Map.from_pw_multi_aff(pma))
    return rebuilt if len(str(rebuilt)) < len(text) else pma


def _total(pulled: isl.PwMultiAff, here: isl.Set, runs: isl.Set, st: PolyStmt,
           key) -> isl.PwMultiAff:
    """``pulled`` (an access at the schedule points ``here``) made total on ``here``.

    A padded GPU statement (``model.py``) enumerates instances that its guard turns off;
    the access of a clipped region (an attached stage's buffer, ``attach.py``) is not
    defined there, and isl cannot print an access with no value (its "void expression"):
    where the instance never runs, any index will do, so zeros fill the gap; likewise for
    a read under ``te.if_then_else`` at instances whose condition is false (the read is
    not evaluated there). An instance that runs without its store is a fault of the
    model."""
    missing = here.subtract(pulled.domain())
    if missing.is_empty():
        return pulled
    never_runs = missing.intersect(runs).is_empty()
    if never_runs:
        # The guard keeps the statement off the gap: extending the access's one affine
        # function over it prints a plain index where zeros would make a select of the
        # piece's domain per access (a ragged 16x8 register tile printed 1 KB per FMA)
        pieces: list = []
        pulled.coalesce().foreach_piece(lambda _, ma: pieces.append(ma))
        if len(pieces) == 1:
            return isl.PwMultiAff.from_multi_aff(pieces[0]).intersect_domain(here)
    if key in ("w", "ax", "acc") and not never_runs:
        raise InternalError(f"statement {st.name} ({st.plan.name}) runs instances where its "
                            f"access {key!r} is not defined: {missing.intersect(runs)}")
    zero = isl.PwMultiAff.from_multi_aff(isl.MultiAff.zero(pulled.get_space()))
    return pulled.union_add(zero.intersect_domain(missing))


class AstMismatch(InternalError):
    """isl failed to generate a loop nest, or generated one that does not run the
    schedule's statement instances exactly once (found by
    :func:`polytile.schedule.ast_check.mismatches`)."""


class AstUnchecked(AstMismatch):
    """The check of isl's loop nest ran out of :data:`CHECK_OPERATIONS`: with symbolic
    sizes split and tiled several times, the sets of instances a loop nest runs have many
    quasi-affine pieces, and isl's set difference is exponential in them (fuzz seed llvm
    62729: two tiles of symbolic loops, minutes). An unchecked loop nest is never used."""


class AstUnbounded(AstUnchecked):
    """isl's loop nest has a loop without an upper bound (``for (...; 1; ...)``): a domain
    handed to it was unbounded (:func:`_bounded_hull`). Not usable, like an unchecked loop
    nest: the next attempt is tried, then a LoweringError names the stages."""


class AstTooBig(AstUnchecked):
    """isl's AST generation ran out of :data:`GENERATE_OPERATIONS`."""


#: isl operations (about a million a second) the check of one loop nest may take
CHECK_OPERATIONS = 4_000_000

#: the same for the first attempt of :func:`lower_nodes` (isl's own loop nest) where every
#: size is a constant: the check of the conv2d_nchwc template's default config at ResNet's
#: 7x7x512 3x3 layer needs 8-16 million (3 s), and the loop nest was refused
CHECK_OPERATIONS_STATIC_FIRST = 24_000_000

#: isl operations the AST generation of one schedule may take before the next, simpler
#: attempt of :func:`lower_nodes` (a symbolic size read through ``i % 3``, ``i // 2`` and
#: ``N - 1 - i`` by a grouped, split and reordered cache stage: minutes in isl's AST
#: generation at its exact domains, fuzz seed llvm 77700)
GENERATE_OPERATIONS = 5_000_000


def generate_ast(model: Model, sched: isl.Schedule, context: str = "{ : }",
                 env: dict | None = None, guards: dict | None = None,
                 nodes: list | None = None, role_of: dict | None = None,
                 check_ops: int | None = None) -> Stmt:
    """Generate the AST of ``sched``, check it (``ast_check.py``) and convert it into a
    loop-IR statement.

    ``context`` is the isl set of parameter values (GPU hardware indices and their
    ranges); ``env`` maps parameter names to the loop-IR variables that hold them;
    ``guards`` (statement name -> set) replaces the guards of some statements;
    ``role_of`` are the thread roles of ``nodes`` when the caller has them; ``check_ops``
    the isl operations of the check (default :data:`CHECK_OPERATIONS`).

    Raises
    ------
    AstMismatch
        When isl fails, or its AST misses instances, runs extra ones or runs one twice.
    """
    hook = _Hook(model, guards or {})
    ctx = isl.Set(context)
    if iu.context() is not None:   # symbolic sizes: their values satisfy the context
        ctx = ctx.intersect(iu.context())
    build = isl.AstBuild.from_context(ctx)
    build, _keep = build.set_at_each_domain(hook)
    try:
        with iu.operation_limit(GENERATE_OPERATIONS):
            ast = build.node_from_schedule(sched)
    except iu.OperationLimit as exc:
        quota = "maximal number of operations exceeded"
        if quota in str(exc) or any(quota in str(e) for e in hook.errors):
            raise AstTooBig(f"isl's AST generation took more than {GENERATE_OPERATIONS} "
                            f"isl operations") from None
        if hook.errors:
            raise hook.errors[0] from None
        raise AstMismatch(f"isl AST generation failed: {exc}") from None
    if hook.errors:
        raise hook.errors[0]
    names: list = []
    sched.get_domain().foreach_set(lambda st: names.append(st.get_tuple_name()))
    stmts = {n: model.stmts[n] for n in names}

    def guard_of(node):
        return hook.guard_exprs[int(node.get_annotation().get_name()[1:])]

    # a GPU kernel's statements with the thread that runs each instance (ast_check._covered)
    one_thread = None if role_of is None else {
        n: role_of[n].one_thread() for n in names if n in role_of}

    def check(ops: int) -> list:
        with iu.operation_limit(ops):
            return mismatches(ast, stmts, ctx, guard_of, one_thread)

    try:
        bad = check(CHECK_OPERATIONS // 8)
    except iu.OperationLimit:
        # constant sizes: run the loop nest on integers instead (exact too; a GPU kernel's
        # fused, non-divisibly tiled and bound loops took 15 s of symbolic check to fail)
        bad = concrete_mismatches(ast, stmts, ctx, guard_of)
    if bad is None:
        ops = check_ops or CHECK_OPERATIONS
        try:
            bad = check(ops)
        except iu.OperationLimit:
            raise AstUnchecked(f"the check of isl's loop nest of {sorted(names)} took more "
                               f"than {ops} isl operations") from None
    if bad:
        raise AstMismatch("isl generated a wrong loop nest: " + "; ".join(bad))
    barriers, idle = set(), {}
    if model.padded and nodes is not None:   # GPU kernel (threads.py)
        role_of = roles(nodes) if role_of is None else role_of
        idle = {name: r.idle for name, r in role_of.items() if r.idle}
        barriers = {p.index for p in model.plans if p.buffer.scope == "shared"}
        barriers |= barrier_plans(model, nodes, role_of)
    return _Converter(model, hook, barriers, idle).convert(ast, dict(env or {}), None)


def lower_nodes(model: Model, nodes: list | None = None, context: str = "{ : }",
                env: dict | None = None) -> Stmt:
    """The loop IR of the nest ``nodes`` (default: the whole program): isl's AST of their
    schedule tree, checked, with fallbacks where isl gets it wrong.

    Tried in order until one passes the check: isl's default loop generation; every loop
    ``atomic``; then, in addition, the domains with existentially quantified dimensions
    replaced by their simple hulls where these are bounded (:func:`_bounded_hull`), the
    exact domains becoming guards (skipped where no hull is bounded).

    Raises
    ------
    InternalError
        When every attempt fails (the message lists the first failure).
    """
    first = None
    role_of = None    # the kernel's thread roles: computed once for every attempt
    ran_atomic = False
    for atomic, hulls in ((False, False), (True, False), (True, True)):
        if atomic and not hulls and isinstance(first, AstTooBig):
            continue   # atomic loops at the same domains are no smaller a problem
        domains = guards = None
        if hulls:
            domains, guards = _hulls(model, nodes)
            if not domains and ran_atomic:
                continue   # (the atomic attempt again)
        ran_atomic = atomic
        try:
            if model.padded and nodes is not None and role_of is None:
                role_of = roles(nodes)
            sched = build_schedule(model, nodes, atomic=atomic, domains=domains,
                                   role_of=role_of)
            static_first = not atomic and iu.context() is None
            return generate_ast(model, sched, context, env, guards, nodes, role_of,
                                CHECK_OPERATIONS_STATIC_FIRST if static_first else None)
        except AstMismatch as exc:
            if first is None or isinstance(first, AstUnchecked) and not isinstance(
                    exc, AstUnchecked):
                first = exc   # a wrong loop nest found says more than an unchecked one
    if isinstance(first, AstUnchecked):
        stages = sorted({st.plan.name for n in (model.nest if nodes is None else nodes)
                         for st in stmts_below(n)})
        fail("lower", f"the loop nest of stages {stages} could not be generated and "
             f"verified in bounded time ({first})", "symbolic sizes split or tiled at most "
             "once or twice, or constant sizes", hint="split symbolic loops by one constant "
             "factor, tile the constant-size loops, or bind the sizes to constants",
             error=LoweringError)
    raise InternalError(f"{first}; hint: simplify the quasi-affine indices (mod, floordiv) "
                        f"of reads of attached stages, or compute those stages at root")


def _hulls(model: Model, nodes: list | None) -> tuple[dict, dict]:
    """Simple hulls of the statement domains that have existentially quantified
    dimensions (where isl's AST generation has gone wrong), and the guards that keep
    their exact instances."""
    domains, guards = {}, {}
    for n in (model.nest if nodes is None else nodes):
        for st in stmts_below(n):
            divs: list = []
            st.domain.foreach_basic_set(lambda b: divs.append(b.dim(isl.dim_type.div)))
            if any(divs):
                hull = _bounded_hull(st.domain)
                if hull is None:
                    continue   # (its exact domain, as in the attempts before)
                domains[st.name] = hull
                guards[st.name] = st.exact.gist(hull)
    return domains, guards


def _bounded_hull(domain: isl.Set) -> isl.Set | None:
    """The simple hull of ``domain`` (a convex superset without existentially quantified
    dimensions), or None where it is unbounded.

    The simple hull keeps only translates of the constraints of the pieces: a union of
    pieces each bounded by a different quasi-affine expression of the symbolic sizes
    (``y <= 2 - i + 3j`` in one, ``y <= 1`` in another) has none that bounds every piece,
    and its hull is unbounded: isl writes ``for (...; 1; ...)`` (fuzz seed llvm 102419,
    three quasi-affine reads of a producer under a cache, symbolic sizes). Bounded convex
    hulls (``polyhedral_hull``) of such domains took seconds each, and the loop nest over
    them longer than the attempts before: the statement keeps its exact domain."""
    hull = isl.Set.from_basic_set(domain.remove_divs().simple_hull())
    return hull if hull.is_bounded() else None


class _Converter:
    def __init__(self, model: Model, hook: _Hook, barriers: set = frozenset(),
                 idle: dict | None = None):
        self.model = model
        self.iv_of: dict = {}   # id(For) -> the IterVar it is the loop of
        self.hook = hook
        self.barriers = barriers   # plan indices of attached stages between barriers
        self.idle = idle or {}     # statement name -> tags of which only index 0 runs it

    def convert(self, node: isl.AstNode, env: dict, pending: LoopNode | None) -> Stmt | None:
        t = node.get_type()
        NT = isl.ast_node_type
        if t == NT.block:
            ch = node.block_get_children()
            return self.convert_block([ch.get_at(k) for k in range(ch.n_ast_node())], env,
                                      pending)
        if t == NT.mark:
            name = node.mark_get_id().get_name()
            if name[0] == "A":   # the code of an attached stage
                plan = self.model.plans[int(name[1:])]
                body = self.convert(node.mark_get_node(), env, pending)
                if plan.index in self.barriers:
                    # written by some threads, read by others: barrier before (the previous
                    # iteration's readers are done) and after (the writes are visible)
                    return seq(Sync("shared"), body, Sync("shared"))
                return body
            return self.convert(node.mark_get_node(), env, self.model.loops[int(name[1:])])
        if t == NT.if_:
            cond = self.expr(node.if_get_cond(), env)
            then = self.convert(node.if_get_then_node(), env, pending)
            other = (self.convert(node.if_get_else_node(), env, pending)
                     if node.if_has_else_node() else None)
            return IfThenElse(cond, then, other)
        if t == NT.for_:
            return self.convert_for(node, env, pending)
        if t == NT.user:
            return self.convert_user(node, env)
        raise InternalError(f"unexpected isl AST node type {t}")

    def _shared_copy(self, node: isl.AstNode):
        """The plan of a shared stage whose code ``node`` is (an ``A`` mark), else None."""
        if node.get_type() != isl.ast_node_type.mark:
            return None
        name = node.mark_get_id().get_name()
        if name[0] != "A":
            return None
        plan = self.model.plans[int(name[1:])]
        return plan if plan.index in self.barriers else None

    def _within(self, plan) -> list:
        """``plan`` and the plans computed inside its code (attached to it, directly or
        through other attached plans)."""
        out = [plan]
        for q in self.model.plans:
            p = q
            while p.attach is not None and p is not plan:
                p = p.attach[0]
            if p is plan and q is not plan:
                out.append(q)
        return out

    def convert_block(self, nodes: list, env: dict, pending) -> Stmt:
        """Statements in order; consecutive copies into shared buffers whose code (the
        stages computed inside it included) does not read each other share one pair of
        barriers."""
        out: list = []
        group: list = []
        written: set = set()   # the stages whose code the group's code holds
        for n in nodes:
            plan = self._shared_copy(n)
            inner = self._within(plan) if plan is not None else ()
            # a copy's code holds the stages computed inside it, which read too: the
            # partial of a cross-thread reduction holds the local rfactor stage reading an
            # earlier shared copy (fuzz cuda 92869 shared the copy's barrier pair with it)
            if group and (plan is None or any(rd.source in written for q in inner
                                              for rd in q.reads)):
                out.append(Sync("shared"))
                group, written = [], set()
            if plan is None:
                out.append(self.convert(n, env, pending))
                continue
            if not group:
                out.append(Sync("shared"))
            group.append(plan)
            written |= {q.stage for q in inner}
            out.append(self.convert(n.mark_get_node(), env, pending))
        if group:
            out.append(Sync("shared"))
        return seq(*out)

    def expr(self, e: isl.AstExpr, env: dict) -> Expr:
        return iu.ast_expr(e, lambda name: env[name] if name in env else _param(name))

    def convert_for(self, node: isl.AstNode, env: dict, loop: LoopNode | None) -> Stmt:
        it = node.for_get_iterator().get_id().get_name()
        name = loop.iter_var.name if loop is not None else it
        # a stage computed inside its consumer may name its loops like the consumer's:
        # keep the printed nest unambiguous (``i``, then ``i_1``)
        taken = {x.name for x in env.values() if isinstance(x, Var)}
        base, k = name, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        v = Var("int64", name)
        inner = {**env, it: v}
        init = self.expr(node.for_get_init(), env)
        body = self.convert(node.for_get_body(), inner, None)
        if node.for_is_degenerate():
            prag = () if loop is None else for_pragmas(loop.plan.stage, loop.iter_var)
            if any(isinstance(p, AutoUnrollPragma) for p in prag):
                # a one-iteration loop (TVM's ``kernel_scope``, a bound loop) keeps its
                # auto-unroll scope for the loops inside
                return For(v, init, Const("int64", 1), LoopKind.SERIAL, body, 1, prag)
            return LetStmt(v, init, body)
        cond = self.expr(node.for_get_cond(), inner)
        if not (isinstance(cond, Cmp) and cond.a is v and cond.op in ("le", "lt")):
            raise AstUnbounded(f"unexpected isl loop condition {node.for_get_cond().to_C_str()}"
                              f" of loop {name!r}")
        upper = cond.b if cond.op == "lt" else Binary("int64", "add", cond.b, Const("int64", 1))
        extent = Binary("int64", "sub", upper, init)
        step = node.for_get_inc().get_val().to_python()
        kind, pragmas = LoopKind.SERIAL, ()
        if loop is not None:
            rel = loop.plan.strips.get(loop.iter_var)
            if rel is not None:
                return _strip_mine(rel, loop, v, init, extent, step, body, taken)
            kind = loop_kind(loop.annotation)
            if loop.key in self.model.rolled:
                kind = LoopKind.SERIAL
            # a software pipeline keeps its parameters (stages, names for messages)
            pragmas = for_pragmas(loop.plan.stage, loop.iter_var)
        out = For(v, init, extent, kind, body, step, pragmas)
        if loop is not None:
            self.iv_of[id(out)] = loop.iter_var
            out = _coalesce(out, loop.plan.stage, self.iv_of, taken)
            out = _unit_scopes(out, loop.plan.stage, loop.iter_var)
        return out

    def convert_user(self, node: isl.AstNode, env: dict) -> Stmt:
        st, idx, guard = self.hook.info[int(node.get_annotation().get_name()[1:])]
        mapping = {ph: env[name] for name, ph in self.hook.placeholders.items() if name in env}
        idx = {k: tuple(substitute(i, mapping) for i in v) for k, v in idx.items()}
        out = make_store(st, idx, self.model)
        if guard is not None:
            out = IfThenElse(substitute(guard, mapping), out, None)
        stage = st.plan.stage
        if st.name in self.idle:   # idle threads (threads.py)
            out = IfThenElse(logical_and(*[Cmp("bool", "eq", env[t.param], Const("int64", 0))
                                           for t in self.idle[st.name]]), out, None)
        if stage.store_predicate is not None:   # set_store_predicate: thread indices
            tvars = {v: Cast(v.dtype, env[t.param])
                     for v, t in stage.store_predicate_tags.items()}
            out = IfThenElse(substitute(stage.store_predicate, tvars), out, None)
        return out


class _Body(ExprMutator):
    """Tensor-expression body -> loop-IR expression at one statement instance."""

    def __init__(self, env: dict, idx: dict, st: PolyStmt, model: Model):
        self.env = env
        self.idx = idx
        self.st = st
        self.model = model
        self.guards: list[Expr] = []     # conditions under which the current node runs
        self.checks: list[Assert] = []   # run-time bounds checks of data-dependent reads

    def memo_key(self, e):
        # a shared node under other guards gets its own run-time checks
        return (id(e),) + tuple(id(g) for g in self.guards)

    def visit_Select(self, e: Select):
        cond = self.visit(e.cond)
        self.guards.append(cond)
        t = self.visit(e.true_value)
        self.guards[-1] = Not("bool", cond)
        f = self.visit(e.false_value)
        self.guards.pop()
        return Select(e.dtype, cond, t, f)

    def visit_Binary(self, e: Binary):
        out = self.generic_visit(e)
        if (e.op in _INT_DIVS and dt.is_int(e.dtype) and not isinstance(out.b, Const)):
            # the divisor is data: a zero divisor is an error (x86 traps on it); the
            # minimum integer divided by -1 wraps like numpy (the code generators guard it)
            ok = Cmp("bool", "ne", out.b, Const(e.dtype, 0))
            if self.guards:
                ok = Or("bool", Not("bool", logical_and(*self.guards)), ok)
            self.checks.append(Assert(ok, f"stage {self.st.plan.name!r} divides by zero "
                                      f"in {e}", "ZeroDivisionError"))
        return out

    def _check(self, r, idx: tuple) -> None:
        """An ``Assert`` that a read whose index isl cannot bound stays in its tensor."""
        def extent(n) -> Expr:   # (a symbolic dimension: its expression, as int64)
            if sym.is_static(n):
                return Const("int64", sym.static(n))
            e = sym.as_expr(n)
            return e if e.dtype == "int64" else Cast("int64", e)

        inside = logical_and(*[c for i, n in zip(idx, r.tensor.shape)
                               for c in (Cmp("bool", "ge", i, Const("int64", 0)),
                                         Cmp("bool", "lt", i, extent(n)))])
        if self.guards:
            inside = Or("bool", Not("bool", logical_and(*self.guards)), inside)
        self.checks.append(Assert(inside, f"stage {self.st.plan.name!r} reads "
                                  f"{r.tensor.name}[{', '.join(map(str, r.indices))}] outside "
                                  f"its shape {r.tensor.shape} (an index isl cannot bound, checked "
                                  "at run time)"))

    def visit_Var(self, v: Var):
        return self.env.get(v, v)

    def visit_TensorRead(self, r):
        key = id(r)
        if key in self.idx:
            buf = self.st.accesses[key][0]
            return Load(r.dtype, buf, self.idx[key])
        src = self.model.stage_of[id(r.tensor.op)]
        if src.attach_type == "scope":
            raise InternalError(f"non-affine read {r} of attached stage {src.name}")
        buf: Buffer = self.model.buffer_of(r.tensor)
        idx = tuple(_to_index(self.visit(i)) for i in r.indices)
        self._check(r, idx)
        if src.layouts:   # transform_layout: the element's position in the buffer
            idx = tuple(_to_index(i) for i in apply_indices(src.layouts, idx))
        return Load(r.dtype, buf, idx)


def _strip_mine(rel, loop: LoopNode, v: Var, init: Expr, extent: Expr, step: int, body: Stmt,
                taken: set) -> Stmt:
    """The loop ``for v in range(init, init + extent, step)`` that isl generated for the
    parent of a split by a symbolic factor ``f``, as its two loops::

        for x.outer in range(0, ceil(trip / f)):
          for x.inner in range(0, min(f, trip - f * x.outer)):
            v = init + step * (f * x.outer + x.inner)

    (``trip`` the loop's iteration count). Each of isl's loops over the parent (a loop
    split around a guard, say) is strip-mined on its own: the iterations run in the same
    order, so the result is the unsplit loop's."""
    def name(base: str) -> str:
        out, k = base, 1
        while out in taken or out == v.name:
            out, k = f"{base}_{k}", k + 1
        taken.add(out)
        return out

    f = _to_index(rel.sym)
    one = Const("int64", 1)
    trip = extent if step == 1 else Binary("int64", "floordiv", Binary(
        "int64", "add", extent, Const("int64", step - 1)), Const("int64", step))
    vo, vi = Var("int64", name(rel.outer.name)), Var("int64", name(rel.inner.name))
    done = Binary("int64", "mul", f, vo)
    pos = Binary("int64", "add", done, vi)
    if step != 1:
        pos = Binary("int64", "mul", Const("int64", step), pos)
    inner = For(vi, Const("int64", 0),
                Binary("int64", "min", f, Binary("int64", "sub", trip, done)),
                loop_kind(loop.plan.stage.annotations.get(rel.inner)),
                LetStmt(v, Binary("int64", "add", init, pos), body), 1, ())
    outer_ext = Binary("int64", "floordiv", Binary("int64", "add", trip,
                                                   Binary("int64", "sub", f, one)), f)
    pragmas = for_pragmas(loop.plan.stage, rel.outer)
    return For(vo, Const("int64", 0), outer_ext,
               loop_kind(loop.plan.stage.annotations.get(rel.outer)), inner, 1, pragmas)


def _coalesce(f: For, stage, iv_of: dict, taken: set) -> Stmt:
    """The perfect nest ``for o: for i: body`` of a fuse of symbolic inner extent ``E``
    (``relations.symbolic_fuse``) as its fused loop::

        for o.i.fused in range(0, ext_o * E):
          o = init_o + o.i.fused // E
          i = i_min + o.i.fused % E
          if init_i(o) <= i < init_i(o) + ext_i(o): body

    repeatedly (``fuse(a, b, c)``). A nest isl generated otherwise is kept as it is (the
    same iterations in the same order; the fused loop's annotation is on both loops)."""
    while True:
        rel = next((r for r in stage.relations if getattr(r, "sym", None) is True
                    and r.outer is iv_of.get(id(f))), None)
        inner, rebuild = _inner_for(f.body)
        if (rel is None or inner is None or iv_of.get(id(inner)) is not rel.inner
                or f.step != 1 or inner.step != 1):
            return f
        e = _to_index(sym.as_expr(rel.inner.dom.extent))
        lo = _to_index(sym.as_expr(rel.inner.dom.min))
        name, k = rel.fused.name, 1
        while name in taken:
            name, k = f"{rel.fused.name}_{k}", k + 1
        taken.add(name)
        fv = Var("int64", name)
        o_val = Binary("int64", "add", f.min, Binary("int64", "floordiv", fv, e))
        i_val = Binary("int64", "add", lo, Binary("int64", "floormod", fv, e))
        guard = logical_and(Cmp("bool", "le", inner.min, inner.var),
                            Cmp("bool", "lt", inner.var,
                                Binary("int64", "add", inner.min, inner.extent)))
        body = LetStmt(f.var, o_val, rebuild(LetStmt(inner.var, i_val,
                                                     IfThenElse(guard, inner.body))))
        ann = stage.annotations.get(rel.fused)
        out = For(fv, Const("int64", 0), Binary("int64", "mul", f.extent, e), loop_kind(ann),
                  body, 1, for_pragmas(stage, rel.fused))
        iv_of[id(out)] = rel.fused
        f = out


def _inner_for(s: Stmt):
    """The loop directly inside ``s`` through the lets and guards a previous coalescing
    wrote (``(None, None)`` if there is none), and a function that puts a statement in
    its place."""
    if isinstance(s, For):
        return s, lambda x: x
    if isinstance(s, LetStmt):
        f, rb = _inner_for(s.body)
        return f, lambda x: LetStmt(s.var, s.value, rb(x))
    if isinstance(s, IfThenElse) and s.else_case is None:
        f, rb = _inner_for(s.then_case)
        return f, lambda x: IfThenElse(s.cond, rb(x))
    return None, None


def _param(name: str) -> Expr:
    v = iu.param_var(name)
    if v is None:
        raise InternalError(f"isl AST names the unknown identifier {name}")
    return _to_index(v)


def _to_index(e: Expr) -> Expr:
    if e.dtype == "int64":
        return e
    if isinstance(e, Cast) and e.value.dtype == "int64":
        return e.value
    return Cast("int64", e)


def _as(e: Expr, dtype: str) -> Expr:
    return e if e.dtype == dtype else Cast(dtype, e)


def make_store(st: PolyStmt, idx: dict, model: Model) -> Stmt:
    """The loop-IR statement of one instance of ``st``, given the index expressions
    ``idx`` of its accesses (and of its axis values, key ``"ax"``)."""
    p = st.plan
    if p.tensorize is not None and st.name in p.tensorize.parts:
        return make_tensor_call(st, idx)
    ax = idx["ax"]
    own_vars = p.axis_vars + (p.reduce_vars if st.kind == "update" else [])
    env = {v: Cast(v.dtype, c) for v, c in zip(own_vars, ax)}
    body = _Body(env, idx, st, model)
    buf, _ = st.accesses["w"]
    widx = idx["w"]
    red = p.body
    if len(p.bodies) > 1 or (isinstance(red, Reduce)
                             and isinstance(red.combiner, TupleCommReducer)):
        return _tuple_store(st, p, body, widx)
    if st.kind == "compute":
        value = body.visit(p.body)   # collects the run-time checks first
        return seq(*body.checks, Store(buf, widx, value))
    # a wide accumulator, when the stage has one (model.py), else the stage's buffer
    acc_buf, aidx = (p.acc, idx["acc"]) if p.acc is not None else (buf, widx)
    if st.kind == "round":
        return Store(buf, widx, Cast(buf.dtype, Load(acc_buf.dtype, acc_buf, aidx)))
    comb = red.combiner
    if acc_buf is not buf:
        comb = widened(comb, acc_buf.dtype)
    if st.kind == "init":
        init = body.visit(red.init) if red.init is not None else comb.identity
        out: Stmt = Store(acc_buf, aidx, _as(init, acc_buf.dtype))
    else:
        acc = Load(acc_buf.dtype, acc_buf, aidx)
        where = None
        if red.condition is not None and p.where is None:
            where = body.visit(red.condition)
            body.guards.append(where)
        out = Store(acc_buf, aidx, comb.combine(acc, _as(body.visit(red.source),
                                                         acc_buf.dtype)))
        if where is not None:
            body.guards.pop()
            out = IfThenElse(where, seq(*body.checks, out), None)
            body.checks = []
    return seq(*body.checks, out)


def _tuple_store(st: PolyStmt, p, body: _Body, widx: tuple) -> Stmt:
    """One instance of a statement of a stage with several outputs: every output stored at
    the same element. A tuple reduction's update computes all new values from the old
    ones first (``LetStmt``), then stores them: the elements of a tuple combiner read each
    other's accumulators (argmax's index follows the values)."""
    if st.kind == "compute":
        values = [body.visit(b) for b in p.bodies]
        return seq(*body.checks, *[Store(o, widx, v) for o, v in zip(p.outs, values)])
    comb = p.body.combiner
    if st.kind == "init":
        values = [body.visit(b.init) if b.init is not None else comb.identity[k]
                  for k, b in enumerate(p.bodies)]
        return seq(*body.checks, *[Store(o, widx, _as(v, o.dtype))
                                   for o, v in zip(p.outs, values)])
    if st.kind != "update":
        raise InternalError(f"statement kind {st.kind!r} of tuple reduction {p.name!r}")
    where = None
    if p.body.condition is not None and p.where is None:
        where = body.visit(p.body.condition)
        body.guards.append(where)
    accs = tuple(Load(o.dtype, o, widx) for o in p.outs)
    vals = tuple(_as(body.visit(b.source), o.dtype) for b, o in zip(p.bodies, p.outs))
    news = comb.combine_all(accs, vals)
    stem = p.name.replace(".", "_")
    tmps = [Var(o.dtype, f"{stem}_v{k}_next") for k, o in enumerate(p.outs)]
    out: Stmt = seq(*[Store(o, widx, t) for o, t in zip(p.outs, tmps)])
    for t, v in reversed(list(zip(tmps, news))):
        out = LetStmt(t, _as(v, t.dtype), out)
    if where is not None:
        body.guards.pop()
        out = IfThenElse(where, seq(*body.checks, out), None)
        body.checks = []
    return seq(*body.checks, out)


def _unit_scopes(out: For, stage, iv) -> Stmt:
    """``out`` (the loop of ``iv``) inside the one-iteration scope of an
    ``auto_unroll_max_step`` pragma on a loop of extent 1 just outside it (TVM's
    ``kernel_scope = split(axis, nparts=1)``), which isl generates no loop for."""
    leaves = stage.leaf_iter_vars
    if iv not in leaves:
        return out
    for x in reversed(leaves[:leaves.index(iv)]):
        if x.dom is None or not isinstance(x.dom.extent, int) or x.dom.extent != 1:
            break
        prag = tuple(p for p in for_pragmas(stage, x) if isinstance(p, AutoUnrollPragma))
        if prag:
            out = For(Var("int64", x.name), Const("int64", 0), Const("int64", 1),
                      LoopKind.SERIAL, out, 1, prag)
    return out
