"""Subexpression sharing: an expression DAG becomes let-bound variables.

Expressions are immutable and compared by identity, so one node may be the operand of
several parents: ``compute_inline`` of a stage that is read twice, a Python variable used
twice in a compute lambda, the simplifier reusing an operand. Code generators and printers
walk expressions as trees, and a chain of ``L`` levels each using its operand twice unfolds
to ``2**L`` nodes. This pass, the last of the loop passes, binds every node used more than
once by one statement to a ``LetStmt`` variable placed just before that statement, so the
code every target receives (and ``lower`` prints) is linear in the size of the DAG.

Assumes: loop IR before storage flattening; expressions are pure (a node evaluates to the
same value wherever it is used in one statement).

Guarantees: the statement computes the same values. A shared node is hoisted only where
evaluating it before the statement is safe: it is evaluated unconditionally by the
statement (not only under a ``Select`` branch or the right operand of ``and``/``or``), or
it cannot trap (it holds no ``Load`` and no integer division). Statements of the same
nesting keep their order; no node is shared across statements, except that the lets of a
vectorized loop's statement that do not depend on the lane move before the loop (its
extent is a positive constant: they were evaluated anyway), and that the values of a
chain of lets (a tuple reduction's update, every new element from the old ones) are one
statement: a node two of them use is bound once before the chain, unless it reads a
variable of the chain.

Helps: compile time and code size of deep inlined chains (a 40-stage chain builds in about
a second); LLVM and nvcc would find the common subexpressions themselves, but only after
receiving code of exponential size.
"""

from __future__ import annotations

from polytile.te import dtype as dt
from polytile.te.expr import (_CHILDREN, And, Binary, Cast, Const, Expr, Or, Select, Var,
                              child_fields)
from polytile.te.visitor import ExprMutator, free_vars

from ..kinds import LoopKind
from ..loop_ir import Assert, Evaluate, For, IfThenElse, LetStmt, Load, StmtMutator, Store

_DIVS = ("floordiv", "floormod", "truncdiv", "truncmod", "div")


def _kids(e: Expr) -> list:
    out = []
    for f in child_fields(e):
        v = getattr(e, f)
        out += [c for c in (v if isinstance(v, tuple) else (v,)) if isinstance(c, Expr)]
    return out


def _cheap(e: Expr) -> bool:
    """Nodes as cheap to repeat as to name."""
    return isinstance(e, (Var, Const)) or (isinstance(e, Cast)
                                          and isinstance(e.value, (Var, Const)))


def _uses(roots: list) -> tuple[dict, list]:
    """Parent-edge counts of every node reachable from ``roots`` (by id), and the nodes
    in post order (children first), each once."""
    count: dict[int, int] = {}
    order: list = []
    for r in roots:
        count[id(r)] = count.get(id(r), 0) + 1
        if count[id(r)] > 1:
            continue
        stack = [(r, False)]
        while stack:
            x, done = stack.pop()
            if done:
                order.append(x)
                continue
            stack.append((x, True))
            for c in _kids(x):
                count[id(c)] = count.get(id(c), 0) + 1
                if count[id(c)] == 1:
                    stack.append((c, False))
    return count, order


#: The most nodes below a load whose ids ``_reached_twice`` remembers (see ``loads``).
LOAD_IDS = 64


def _load_ids(x: Load):
    """The ids of ``x`` and of the nodes of its indices other than variables and
    constants, each reached once; ``None`` if one is reached twice, ``False`` if there are
    more than :data:`LOAD_IDS`."""
    seen: set[int] = set()
    if _reached_twice([x], seen=seen):
        return None
    return frozenset(seen) if len(seen) <= LOAD_IDS else False


def _reached_twice(roots: list, loads: dict | None = None, seen: set | None = None) -> bool:
    """Whether some node other than a variable or constant is reached twice from
    ``roots`` (a necessary condition for :func:`_uses` to find a node worth sharing);
    cheaper than counting every edge. ``loads`` (id -> (load, :func:`_load_ids`)) keeps
    the nodes of each load for the next statements (the copies of an unrolled body
    share their loads): a load's nodes are added at once instead of walked."""
    seen = set() if seen is None else seen
    stack = list(roots)
    pop, push = stack.pop, stack.append
    while stack:
        x = pop()
        cls = x.__class__
        if cls is Const or cls is Var:
            continue
        if loads is not None and cls is Load:
            hit = loads.get(id(x))
            if hit is None or hit[0] is not x:
                hit = loads[id(x)] = (x, _load_ids(x))   # (holding x keeps its id)
            ids = hit[1]
            if ids is None:
                return True
            if ids is not False:
                if not seen.isdisjoint(ids):
                    return True
                seen |= ids
                continue
        if id(x) in seen:
            return True
        seen.add(id(x))
        for f in _CHILDREN[cls]:
            v = getattr(x, f)
            if v.__class__ is tuple:
                stack.extend([c for c in v if isinstance(c, Expr)])
            elif isinstance(v, Expr):
                push(v)
    return False


def _unconditional(roots: list) -> set:
    """Ids of the nodes every evaluation of the statement evaluates."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Select):
            stack.append(x.cond)
        elif isinstance(x, (And, Or)):
            stack.append(x.a)
        else:
            stack.extend(_kids(x))
    return seen


def _may_trap(order: list) -> set:
    """Ids of the nodes whose evaluation may fault: they hold a load or an integer
    division (by zero, or the minimum integer by -1 on x86)."""
    out: set[int] = set()
    for x in order:   # children first
        if (isinstance(x, Load) or (isinstance(x, Binary) and x.op in _DIVS
                                    and dt.is_int(x.dtype))
                or any(id(c) in out for c in _kids(x))):
            out.add(id(x))
    return out


class _Replace(ExprMutator):
    def __init__(self, names: dict):
        self.names = names     # id(node) -> Var

    def visit(self, e):
        v = self.names.get(id(e))
        return v if v is not None else super().visit(e)


class _Share(StmtMutator):
    def __init__(self):
        self.n = 0
        self.loads: dict = {}   # id -> (load, its nodes' ids), see _reached_twice

    def _bind(self, s, fields: tuple):
        roots = []
        for f in fields:
            v = getattr(s, f)
            roots += [x for x in (v if isinstance(v, tuple) else (v,)) if isinstance(x, Expr)]
        if not _reached_twice(roots, self.loads):   # most statements: nothing to share
            return s
        rep, lets = self._name(roots)
        if not lets:
            return s
        changes = {}
        for f in fields:
            v = getattr(s, f)
            if isinstance(v, tuple):
                changes[f] = tuple(rep.visit(x) if isinstance(x, Expr) else x for x in v)
            elif isinstance(v, Expr):
                changes[f] = rep.visit(v)
        out = type(s)(**{**{k: getattr(s, k) for k in s.__dataclass_fields__}, **changes})
        for var, value in reversed(lets):
            out = LetStmt(var, value, out)
        return out

    def _name(self, roots: list, keep=None) -> tuple:
        """``(replacer, [(var, value)])``: a variable for every node ``roots`` reach more
        than once that is worth naming (not cheap, not bool; ``keep(node)`` if given) and
        safe to evaluate before them (always evaluated, or cannot trap), children first
        (a value names the shared nodes below it); the replacer rewrites an expression with
        those names."""
        count, order = _uses(roots)
        shared = [x for x in order if count[id(x)] > 1 and not _cheap(x)
                  and x.dtype != "bool" and (keep is None or keep(x))]
        if shared:
            always = _unconditional(roots)
            trap = _may_trap(order)
            shared = [x for x in shared if id(x) in always or id(x) not in trap]
        names: dict[int, Var] = {}
        rep = _Replace(names)
        lets = []
        for x in shared:
            value = rep.generic_visit(x)
            var = Var(x.dtype, f"cse{self.n}")
            self.n += 1
            names[id(x)] = var
            lets.append((var, value))
        return rep, lets

    def visit_Store(self, s: Store):
        return self._bind(s, ("indices", "value"))

    def visit_For(self, s: For):
        # the lets of a vectorized loop's statement that do not depend on the lane go
        # before the loop: a vector copy (a zero-filled gather's condition) stays one
        # statement that the C printer turns into one 16-byte copy
        out = self.generic_visit(s)
        if out.kind != LoopKind.VECTORIZED or not (isinstance(out.extent, Const)
                                                   and out.extent.value > 0):
            return out
        body, lets = out.body, []
        while isinstance(body, LetStmt) and not any(x is s.var for x in free_vars(body.value)):
            lets.append((body.var, body.value))
            body = body.body
        if not lets:
            return out
        out = For(out.var, out.min, out.extent, out.kind, body, out.step, out.pragmas)
        for var, value in reversed(lets):
            out = LetStmt(var, value, out)
        return out

    def visit_Assert(self, s: Assert):
        return self._bind(s, ("cond",))

    def visit_Evaluate(self, s: Evaluate):
        return self._bind(s, ("value",))

    def visit_IfThenElse(self, s: IfThenElse):
        return self._bind(self.generic_visit(s), ("cond",))

    def visit_LetStmt(self, s: LetStmt):
        return self._bind(self.generic_visit(self._chain(s)), ("value",))

    def _chain(self, s: LetStmt):
        """A chain of lets (a tuple reduction's update: every new value of the tuple
        from the old ones, ``astgen``) as one statement: a node two of their values use
        (argmax's comparison, the shifted value ``d`` of a sum and a sum of squares) is
        bound once before the chain, unless it reads a variable the chain binds."""
        lets, x = [], s
        while isinstance(x, LetStmt):
            lets.append(x)
            x = x.body
        roots = [let.value for let in lets]
        if len(lets) < 2 or not _reached_twice(roots, self.loads):
            return s
        bound = {id(let.var) for let in lets}
        rep, pre = self._name(roots, lambda n: not any(id(v) in bound for v in free_vars(n)))
        if not pre:
            return s
        out = x
        for let in reversed(lets):
            out = LetStmt(let.var, rep.visit(let.value), out)
        for var, value in reversed(pre):
            out = LetStmt(var, value, out)
        return out


def share_subexpressions(stmt):
    """See the module docstring."""
    return _Share().visit(stmt)
