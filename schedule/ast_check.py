"""Translation validation of isl's AST: does the generated loop nest run each statement
instance of the schedule exactly once?

isl's AST generator is trusted nowhere else, and it has been caught wrong: on domains with
existentially quantified dimensions (nested attach footprints with ``i % 2`` and ``j // 3``
reads) it emitted loop bounds and stride conditions that skip instances, under every loop
type and build option (cases F4, F5 and the random nested-attach tests). This module reads
the AST back into isl sets, symbolically (no enumeration, so it costs the same for any
extent): a ``for`` contributes ``init <= c``, its condition and its stride, an ``if`` its
condition (or the complement), a call the statement instance its arguments name, under the
statement's own guard (padded GPU statements). Then, per statement,

* the instances executed, over all values of the hardware indices, equal the instances
  that must run (``PolyStmt.exact``);
* for fixed hardware indices, no instance runs twice (the map from loop iterations to
  instances is injective).

Expressions keep the generated code's meaning: ``pdiv_q``/``pdiv_r``/``zdiv_r`` truncate
(``tdiv``), ``fdiv_q`` floors, booleans are sets. Reference: isl manual, "AST Generation";
Pnueli et al., "Translation validation" (TACAS 1998).
"""

from __future__ import annotations

import islpy as isl

from . import isl_util as iu

_T = isl.ast_expr_op_type
_NT = isl.ast_node_type


class _Reader:
    """Converts isl AST expressions into ``PwAff``s / sets over one iteration space."""

    def __init__(self, context: isl.Set, depth: int):
        params = [context.get_dim_name(isl.dim_type.param, k)
                  for k in range(context.dim(isl.dim_type.param))]
        dims = ", ".join(f"c{k}" for k in range(depth))
        self.universe = isl.Set(f"[{', '.join(params)}] -> {{ [{dims}] }}")
        self.ls = isl.LocalSpace.from_space(self.universe.get_space())
        self.params = {p: k for k, p in enumerate(params)}
        self.depth = depth

    def const(self, v: int) -> isl.PwAff:
        return isl.PwAff.val_on_domain(self.universe, isl.Val(v))

    def var(self, name: str, env: dict) -> isl.PwAff:
        if name in env:
            return isl.PwAff.var_on_domain(self.ls, isl.dim_type.set, env[name])
        return isl.PwAff.var_on_domain(self.ls, isl.dim_type.param, self.params[name])

    def value(self, e: isl.AstExpr, env: dict) -> isl.PwAff:
        t = e.get_type()
        if t == isl.ast_expr_type.int:
            return self.const(e.get_val().to_python())
        if t == isl.ast_expr_type.id:
            return self.var(e.get_id().get_name(), env)
        op = e.get_op_type()
        if op in (_T.cond, _T.select):
            c = self.cond(e.get_op_arg(0), env)
            a, b = self.value(e.get_op_arg(1), env), self.value(e.get_op_arg(2), env)
            return a.intersect_domain(c).union_add(b.intersect_domain(c.complement()))
        if op in _CMP or op in _BOOL:
            c = self.cond(e, env)   # a condition used as 0/1
            return self.const(1).intersect_domain(c).union_add(
                self.const(0).intersect_domain(c.complement()))
        args = [self.value(e.get_op_arg(k), env) for k in range(e.get_op_n_arg())]
        if op == _T.add:
            return args[0].add(args[1])
        if op == _T.sub:
            return args[0].sub(args[1])
        if op == _T.mul:
            return args[0].mul(args[1])
        if op == _T.minus:
            return args[0].neg()
        if op in (_T.min, _T.max):
            out = args[0]
            for a in args[1:]:
                out = out.min(a) if op == _T.min else out.max(a)
            return out
        if op == _T.fdiv_q:
            return args[0].div(args[1]).floor()
        if op in (_T.pdiv_q, _T.div):
            return args[0].tdiv_q(args[1])
        if op in (_T.pdiv_r, _T.zdiv_r):
            return args[0].tdiv_r(args[1])
        raise NotImplementedError(f"isl AST operation {op}")

    def cond(self, e: isl.AstExpr, env: dict) -> isl.Set:
        if e.get_type() == isl.ast_expr_type.op:
            op = e.get_op_type()
            if op in _BOOL:
                parts = [self.cond(e.get_op_arg(k), env) for k in range(e.get_op_n_arg())]
                out = parts[0]
                for p in parts[1:]:
                    out = out.intersect(p) if op in (_T.and_, _T.and_then) else out.union(p)
                return out
            if op in _CMP:
                a, b = self.value(e.get_op_arg(0), env), self.value(e.get_op_arg(1), env)
                return getattr(a, _CMP[op])(b)
        return self.value(e, env).non_zero_set()   # an integer used as a boolean


_CMP = {_T.eq: "eq_set", _T.le: "le_set", _T.lt: "lt_set", _T.ge: "ge_set", _T.gt: "gt_set"}
_BOOL = (_T.and_, _T.and_then, _T.or_, _T.or_else)


def _depth(node: isl.AstNode) -> int:
    t = node.get_type()
    if t == _NT.for_:
        return 1 + _depth(node.for_get_body())
    if t == _NT.block:
        ch = node.block_get_children()
        return max((_depth(ch.get_at(k)) for k in range(ch.n_ast_node())), default=0)
    if t == _NT.if_:
        d = _depth(node.if_get_then_node())
        return max(d, _depth(node.if_get_else_node())) if node.if_has_else_node() else d
    if t == _NT.mark:
        return _depth(node.mark_get_node())
    return 0


def executed(ast: isl.AstNode, context: isl.Set, guard_of) -> dict:
    """Statement name -> list of maps ``[hardware indices] -> { iteration -> instance }``,
    one per call node of ``ast``. ``guard_of(node)`` returns the AST expression of the
    guard our code wraps around that call (or ``None``)."""
    r = _Reader(context, _depth(ast))
    out: dict = {}

    def walk(node, dom: isl.Set, env: dict, depth: int):
        t = node.get_type()
        if t == _NT.block:
            ch = node.block_get_children()
            for k in range(ch.n_ast_node()):
                walk(ch.get_at(k), dom, env, depth)
        elif t == _NT.mark:
            walk(node.mark_get_node(), dom, env, depth)
        elif t == _NT.if_:
            c = r.cond(node.if_get_cond(), env)
            walk(node.if_get_then_node(), dom.intersect(c), env, depth)
            if node.if_has_else_node():
                walk(node.if_get_else_node(), dom.subtract(c), env, depth)
        elif t == _NT.for_:
            name = node.for_get_iterator().get_id().get_name()
            inner = {**env, name: depth}
            it = isl.PwAff.var_on_domain(r.ls, isl.dim_type.set, depth)
            init = r.value(node.for_get_init(), env)
            if node.for_is_degenerate():
                here = it.eq_set(init)
            else:
                here = it.ge_set(init).intersect(r.cond(node.for_get_cond(), inner))
                step = node.for_get_inc().get_val().to_python()
                if step != 1:
                    here = here.intersect(it.sub(init).mod_val(isl.Val(step)).zero_set())
            walk(node.for_get_body(), dom.intersect(here), inner, depth + 1)
        elif t == _NT.user:
            call = node.user_get_expr()
            name = call.get_op_arg(0).get_id().get_name()
            g = guard_of(node)
            if g is not None:
                dom = dom.intersect(r.cond(g, env))
            for k in range(depth, r.depth):   # iterators of no enclosing loop
                dom = dom.fix_val(isl.dim_type.set, k, isl.Val(0))
            m = None
            for k in range(1, call.get_op_n_arg()):
                mk = isl.Map.from_pw_aff(r.value(call.get_op_arg(k), env))
                m = mk if m is None else m.flat_range_product(mk)
            if m is None:   # a statement without dimensions
                m = isl.Map.from_domain(r.universe).set_tuple_name(isl.dim_type.out, name)
            else:
                m = m.set_tuple_name(isl.dim_type.out, name)
            out.setdefault(name, []).append(m.intersect_domain(dom))
        else:
            raise NotImplementedError(f"isl AST node {t}")

    walk(ast, r.universe.intersect_params(context), {}, 0)
    return out


def mismatches(ast: isl.AstNode, stmts: dict, context: isl.Set, guard_of,
               one_thread: dict | None = None) -> list[str]:
    """Descriptions of the statements of ``stmts`` (name -> :class:`PolyStmt`, those the
    AST was generated for) that ``ast`` runs wrongly: instances missing, extra, or run
    twice by one thread. Empty when the AST is right. ``one_thread``: statement name ->
    :meth:`~.threads.ThreadRole.one_thread` of a GPU kernel's statements."""
    got = executed(ast, context, guard_of)
    bad = []
    for name, st in stmts.items():
        maps = got.get(name, [])
        want = st.exact
        ranges = [m.range() for m in maps]
        if one_thread is not None and name in one_thread and _covered(
                want, ranges, one_thread[name]):
            missing = None
        else:
            missing = _missing(want, ranges)
        extra = _extra(want, ranges)
        if missing is not None:
            bad.append(f"{name} misses {missing}")
        elif extra is not None:
            bad.append(f"{name} runs {extra}, outside its domain")
        else:
            twice = _twice(maps)
            if twice is not None:
                bad.append(f"{name} runs {twice} twice")
    return bad


# the most (instance, call node) pairs that _missing tests one by one (about 1 ms each)
_ENUMERATE = 1024


def _missing(want: isl.Set, ranges: list) -> isl.Point | None:
    """An instance of ``want`` that no range of ``ranges`` (instances a call node runs,
    over the hardware-index parameters) contains; ``None`` if there is none.

    The union over threads is a projection, and when the thread indices are nested
    floor divisions of the instance (a fused loop split, its parts reordered, fused and
    split again, then bound: fuzz seed cuda 7464) it has existential variables with large
    coefficients whose complement isl computes in 10 s or more per subtraction. A small
    parameter-free domain of a kernel is checked point by point instead, each an integer
    feasibility problem over the unprojected range (0.1 s for 77 instances); both ways
    are exact."""
    if (want.dim(isl.dim_type.param) == 0 and any(map(_has_hardware, ranges))
            and _at_most(want, _ENUMERATE // max(len(ranges), 1))):
        points = []
        want.foreach_point(points.append)
        for p in points:
            one = isl.Set.from_point(p)
            if all(r.intersect(one.align_params(r.get_space())).is_empty() for r in ranges):
                return p
        return None
    runs = isl.Set.empty(want.get_space())
    for r in ranges:
        runs = runs.union(_drop_hardware(r))
    missing = want.subtract(runs)
    return None if missing.is_empty() else missing.sample_point()


def _covered(want: isl.Set, ranges: list, one: isl.Set) -> bool:
    """Whether every instance of ``want`` is in a range of ``ranges`` for the hardware
    indices of the thread that ``one`` (:meth:`~.threads.ThreadRole.one_thread`) names
    for it: then none is missing (the converse need not hold: :func:`_missing` decides).

    With the hardware indices functions of the instance, projecting them out is a
    substitution, and the subtraction meets no existential variable of the projection
    that :func:`_missing` does: a grouped GPU GEMM's store of its register tiles took 15 s
    and ran out of operations there (the matmul template's tile [64, 128, 4, 4, 8],
    group 4), and is decided here in milliseconds."""
    covered = None
    for r in ranges:
        o = one.align_params(r.get_space())
        c = _drop_hardware(r.align_params(o.get_space()).intersect(o), simplify=False)
        covered = c if covered is None else covered.union(c)
    return covered is not None and want.subtract(covered).is_empty()


def _at_most(s: isl.Set, limit: int) -> bool:
    """Whether the parameter-free set ``s`` is bounded with at most ``limit`` points. The
    bounding box is checked first: isl counts by enumeration, and counting a 4096^3
    GEMM domain took 8 s (the naive SGEMM's lowering went from 0.2 s to 17 s)."""
    if s.is_empty():
        return True
    if not s.is_bounded():
        return False
    box = 1
    for k in range(s.dim(isl.dim_type.set)):
        box *= s.dim_max_val(k).to_python() - s.dim_min_val(k).to_python() + 1
        if box > limit:
            return False
    return s.count_val().to_python() <= limit


def _has_hardware(s: isl.Set) -> bool:
    """Whether ``s`` has hardware-index parameters (a GPU kernel's); on the CPU there is
    no projection, and the symbolic subtraction is fast."""
    return any(iu.param_var(s.get_dim_name(isl.dim_type.param, k)) is None
               for k in range(s.dim(isl.dim_type.param)))


def _extra(want: isl.Set, ranges: list) -> isl.Point | None:
    """An instance that a range of ``ranges`` contains outside ``want``; ``None`` if
    there is none. ``want`` does not depend on the hardware indices, so the ranges are
    compared unprojected (no existential variables from the projection)."""
    for r in ranges:
        extra = r.subtract(want.align_params(r.get_space()))
        if not extra.is_empty():
            return _drop_hardware(extra).sample_point()
    return None


def _drop_hardware(s: isl.Set, simplify: bool = True) -> isl.Set:
    """``s`` with the hardware-index parameters projected out (the union over threads);
    symbolic sizes stay parameters: instances are compared for each of their values.
    ``simplify``: recover equalities and coalesce (not needed where the indices are
    functions of the instance: :func:`_covered`)."""
    # one projection per run of consecutive hardware parameters, from the last run back:
    # projecting them one at a time made a big GPU AST's check 20x slower
    n = s.dim(isl.dim_type.param)
    hw = [iu.param_var(s.get_dim_name(isl.dim_type.param, k)) is None for k in range(n)]
    end = n
    while end > 0:
        if not hw[end - 1]:
            end -= 1
            continue
        start = end
        while start > 0 and hw[start - 1]:
            start -= 1
        s = s.project_out(isl.dim_type.param, start, end - start)
        end = start
    if not simplify:
        return s
    # the projection leaves existential variables (a thread index that a fused, split
    # copy loop divides); recovering the equalities among them first makes the later
    # subtractions fast (an MFMA GEMM's LDS copies: 210 s -> 0.1 s); both steps are exact
    return s.detect_equalities().coalesce()


def _twice(maps: list) -> isl.Point | None:
    """An instance that two iterations (of one call node, or of two) run, for the same
    hardware indices; ``None`` if there is none."""
    # the maps read off a loop nest of fused, non-divisibly tiled loops have nested floor
    # divisions whose equalities isl has not found yet: is_injective then took 11 s (and
    # ran out of CHECK_OPERATIONS) on 210 instances (fuzz seed llvm 71419: a tile of two
    # loops fused with a third); recovering them first (exact) makes it 0.02 s
    maps = [m.detect_equalities() for m in maps]
    for k, m in enumerate(maps):
        if not m.is_injective():
            same = m.apply_range(m.reverse())   # iteration pairs that run one instance
            ident = isl.Map.identity(same.get_space())
            return m.intersect_domain(same.subtract(ident).domain()).range().sample_point()
        for other in maps[k + 1:]:
            both = m.range().intersect(other.range())
            if not both.is_empty():
                return both.sample_point()
    return None


# ------------------------------------------------------------------------ by enumeration
#: the most AST steps (loop iterations, calls) that :func:`concrete_mismatches` runs
CONCRETE_STEPS = 300_000


class _TooBig(Exception):
    """The loop nest runs more than the steps allowed."""


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _points(s: isl.Set, limit: int) -> list | None:
    """The points of the parameter-free set ``s`` as tuples of ints, or ``None`` when
    it is unbounded or has more than ``limit``."""
    if not _at_most(s, limit):
        return None
    out: list = []
    n = s.dim(isl.dim_type.set)
    s.foreach_point(lambda p: out.append(tuple(
        p.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(n))))
    return out


def _hardware_values(context: isl.Set, limit: int) -> list | None:
    """Every valuation (name -> int) of the parameters of ``context``, all of them
    hardware indices (a GPU kernel's, bounded by the context); ``[{}]`` without
    parameters; ``None`` with a symbolic size among them or more than ``limit``."""
    n = context.dim(isl.dim_type.param)
    names = [context.get_dim_name(isl.dim_type.param, k) for k in range(n)]
    if any(iu.param_var(x) is not None for x in names):
        return None
    if not n:
        return [{}] if not context.is_empty() else []
    box = context.move_dims(isl.dim_type.set, 0, isl.dim_type.param, 0, n)
    pts = _points(box, limit)
    return None if pts is None else [dict(zip(names, p)) for p in pts]


def _trem(a: int, b: int) -> int:
    return a - b * _tdiv(a, b)


_PY_CMP = {_T.eq: "==", _T.le: "<=", _T.lt: "<", _T.ge: ">=", _T.gt: ">"}
_PY_ARITH = {_T.add: "+", _T.sub: "-", _T.mul: "*", _T.fdiv_q: "//"}


class _Compiler:
    """An isl AST as the source of a Python function ``run(runs, n, budget, <params>)``
    that appends each instance a call node runs to ``runs[name]`` (tuples), counts loop
    iterations and calls in ``n[0]`` and raises :class:`_TooBig` past ``budget`` of them.
    Compiled once, it runs once per valuation of the hardware indices."""

    def __init__(self, guard_of):
        self.guard_of = guard_of
        self.names: dict = {}   # isl identifier -> Python variable
        self.lines: list = []

    def var(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def expr(self, e: isl.AstExpr) -> str:
        t = e.get_type()
        if t == isl.ast_expr_type.int:
            return str(e.get_val().to_python())
        if t == isl.ast_expr_type.id:
            return self.var(e.get_id().get_name())
        op = e.get_op_type()
        a = [self.expr(e.get_op_arg(k)) for k in range(e.get_op_n_arg())]
        if op in (_T.cond, _T.select):
            return f"({a[1]} if {a[0]} else {a[2]})"
        if op in (_T.and_, _T.and_then):
            return "(" + " and ".join(a) + ")"
        if op in (_T.or_, _T.or_else):
            return "(" + " or ".join(a) + ")"
        if op in _PY_CMP:
            return f"({a[0]} {_PY_CMP[op]} {a[1]})"
        if op in _PY_ARITH:
            return f"({a[0]} {_PY_ARITH[op]} {a[1]})"
        if op == _T.minus:
            return f"(-{a[0]})"
        if op in (_T.min, _T.max):
            return f"{'min' if op == _T.min else 'max'}({', '.join(a)})"
        if op in (_T.pdiv_q, _T.div):
            return f"_tdiv({a[0]}, {a[1]})"
        if op in (_T.pdiv_r, _T.zdiv_r):
            return f"_trem({a[0]}, {a[1]})"
        raise NotImplementedError(f"isl AST operation {op}")

    def emit(self, line: str, depth: int) -> None:
        self.lines.append("    " * depth + line)

    def stmt(self, node: isl.AstNode, depth: int) -> None:
        t = node.get_type()
        if t == _NT.block:
            ch = node.block_get_children()
            for k in range(ch.n_ast_node()):
                self.stmt(ch.get_at(k), depth)
            self.emit("pass", depth)
        elif t == _NT.mark:
            self.stmt(node.mark_get_node(), depth)
        elif t == _NT.if_:
            self.emit(f"if {self.expr(node.if_get_cond())}:", depth)
            self.stmt(node.if_get_then_node(), depth + 1)
            self.emit("pass", depth + 1)
            if node.if_has_else_node():
                self.emit("else:", depth)
                self.stmt(node.if_get_else_node(), depth + 1)
                self.emit("pass", depth + 1)
        elif t == _NT.for_:
            it = self.var(node.for_get_iterator().get_id().get_name())
            self.emit(f"{it} = {self.expr(node.for_get_init())}", depth)
            if node.for_is_degenerate():
                self.stmt(node.for_get_body(), depth)
                return
            self.emit(f"while {self.expr(node.for_get_cond())}:", depth)
            self.emit("n[0] += 1", depth + 1)
            self.emit("if n[0] > budget: raise _TooBig", depth + 1)
            self.stmt(node.for_get_body(), depth + 1)
            self.emit(f"{it} += {node.for_get_inc().get_val().to_python()}", depth + 1)
        elif t == _NT.user:
            call = node.user_get_expr()
            name = call.get_op_arg(0).get_id().get_name()
            args = [self.expr(call.get_op_arg(k)) for k in range(1, call.get_op_n_arg())]
            g = self.guard_of(node)
            if g is not None:
                self.emit(f"if {self.expr(g)}:", depth)
                depth += 1
            inst = f"({', '.join(args)},)" if args else "()"
            self.emit("n[0] += 1", depth)
            self.emit(f"runs.setdefault({name!r}, []).append({inst})", depth)
        else:
            raise NotImplementedError(f"isl AST node {t}")

    def compile(self, ast: isl.AstNode, params: list):
        """The function ``run(runs, n, budget, **params)`` and the names its
        parameters have for the isl parameters ``params``."""
        self.stmt(ast, 1)
        head = "".join(f", {self.var(p)}=0" for p in params)
        src = "\n".join([f"def run(runs, n, budget{head}):", *self.lines, "    pass"])
        ns = {"_tdiv": _tdiv, "_trem": _trem, "_TooBig": _TooBig}
        exec(compile(src, "<isl AST>", "exec"), ns)  # noqa: S102 - our own translation
        return ns["run"], {p: self.var(p) for p in params}


def concrete_mismatches(ast: isl.AstNode, stmts: dict, context: isl.Set, guard_of,
                        steps: int | None = None) -> list[str] | None:
    """:func:`mismatches` by running ``ast`` on integers, for a loop nest of constant
    sizes: once per valuation of the hardware indices (GPU), comparing the instances run
    with the points of each statement's domain. Exact like the symbolic check, and the
    fallback where that one runs out of isl operations (nested floor divisions of fused,
    non-divisibly tiled loops: fuzz seed llvm 71419). ``None`` when it does not apply
    (symbolic sizes) or would take more than ``steps`` AST steps (default
    :data:`CONCRETE_STEPS`)."""
    steps = CONCRETE_STEPS if steps is None else steps
    hw = _hardware_values(context, steps)
    if hw is None:
        return None
    want: dict = {}
    total = 0
    for name, st in stmts.items():
        exact = st.exact
        if exact.dim(isl.dim_type.param):
            exact = _drop_hardware(exact)   # (it does not depend on the hardware indices)
            if exact.dim(isl.dim_type.param):
                return None
        pts = _points(exact, steps - total)
        if pts is None:
            return None
        total += len(pts) * max(len(hw), 1)
        if total > steps:
            return None
        want[name] = set(pts)
    run, pyname = _Compiler(guard_of).compile(ast, list(hw[0]) if hw else [])
    got: dict = {name: set() for name in stmts}
    bad: list = []
    twice: set = set()   # statements found run twice
    count = [0]          # AST steps, over every valuation
    try:
        for env in hw:
            ran: dict = {}
            run(ran, count, steps, **{pyname[k]: v for k, v in env.items()})
            for name, runs in ran.items():
                if name not in got:
                    continue
                if len(set(runs)) != len(runs) and name not in twice:
                    seen: set = set()
                    again = next(r for r in runs if r in seen or seen.add(r))
                    twice.add(name)
                    bad.append(f"{name} runs {name}{list(again)} twice"
                               + (f" (hardware indices {env})" if env else ""))
                got[name].update(runs)
    except _TooBig:
        return None
    for name in stmts:
        if name in twice:
            continue
        missing = want[name] - got[name]
        extra = got[name] - want[name]
        if missing:
            bad.append(f"{name} misses {name}{list(min(missing))}")
        elif extra:
            bad.append(f"{name} runs {name}{list(min(extra))}, outside its domain")
    return bad
