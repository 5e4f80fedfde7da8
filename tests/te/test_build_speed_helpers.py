"""The helpers behind fast lowering (issue 11): the garbage-collector pause of the deep
entry points, ``collect_many``, and the simplifier's memos (which must not change what it
computes)."""

from __future__ import annotations

import gc

import pytest

from polytile.errors import LoweringError
from polytile.schedule.loop_ir import Buffer, Store, seq
from polytile.schedule.passes import simplify as sp
from polytile.te.depth import deep_recursion
from polytile.te.expr import Binary, Const, Var
from polytile.te.visitor import collect, collect_many


@pytest.fixture
def gc_state():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_gc_paused_inside_and_restored_after(gc_state):
    gc.enable()
    with deep_recursion("t"):
        assert not gc.isenabled()
        with deep_recursion("inner"):
            assert not gc.isenabled()
        assert not gc.isenabled()   # the inner exit does not resume it
    assert gc.isenabled()


def test_gc_left_off_when_it_was_off(gc_state):
    gc.disable()
    with deep_recursion("t"):
        pass
    assert not gc.isenabled()


def test_gc_resumed_after_an_error(gc_state):
    gc.enable()

    def recurse(n):
        return recurse(n + 1)

    with pytest.raises(LoweringError, match="nests too deeply"):
        with deep_recursion("t"):
            recurse(0)
    assert gc.isenabled()


def test_collect_many_is_collect_of_each_in_order_deduplicated():
    i, j, k = Var("int64", "i"), Var("int64", "j"), Var("int64", "k")
    shared = Binary("int64", "mul", i, j)
    e1 = Binary("int64", "add", shared, k)
    e2 = Binary("int64", "sub", j, shared)
    want = []
    for e in (e1, e2, shared):
        want += [v for v in collect(e, Var) if v not in want]
    assert collect_many([e1, e2, shared], Var) == want == [i, j, k]
    assert collect_many([], Var) == []


def _program():
    x = Var("int64", "x")
    buf = Buffer("B", (64,), "float32", "global")
    idx = Binary("int64", "add", Binary("int64", "add", x, Const("int64", 3)),
                 Const("int64", -3))
    return seq(Store(buf, (idx,), Const("float32", 1.0)),
               Store(buf, (Binary("int64", "mul", Const("int64", 1), x),),
                     Const("float32", 2.0)))


def test_simplify_memos_do_not_change_results():
    sp.forget()
    first = str(sp.simplify(_program()))
    again = sp.simplify(sp.simplify(_program()))   # the second pass meets its own output
    assert str(again) == first
    assert first.count("B[x] =") == 2
    sp.forget()
    assert not sp._LINEAR and not sp._SIMPLIFIED
    assert str(sp.simplify(_program())) == first


def test_simplified_statement_returned_as_is():
    sp.forget()
    out = sp.simplify(_program())
    assert sp.simplify(out) is out


def _ids_within(stmt):
    """Per statement: the id pattern of its expressions' nodes (which positions hold the
    same object), the structure ``share_subexpressions`` reads."""
    from polytile.schedule.loop_ir import stmt_exprs, walk_stmts
    from polytile.te.expr import _CHILDREN

    out = []
    for st in walk_stmts(stmt):
        seen, pattern = {}, []
        for e in stmt_exprs(st):
            stack = [e]
            while stack:
                x = stack.pop()
                if isinstance(x, (Var, Const)):
                    continue
                pattern.append(seen.setdefault(id(x), len(seen)))
                for f in _CHILDREN[type(x)]:
                    v = getattr(x, f)
                    stack.extend(c for c in (v if isinstance(v, tuple) else (v,))
                                 if hasattr(c, "dtype"))
        out.append(tuple(pattern))
    return out


def test_unroll_and_simplify_keep_each_statements_sharing():
    """One walker per expression slot (SlotExprMutator): the copies of an unrolled body
    share work, but no statement gains or loses a shared node: after unroll + simplify
    each copy holds the same objects in the same places as with one walker per
    expression (what ``share_subexpressions`` reads)."""
    from polytile.schedule.kinds import LoopKind
    from polytile.schedule.loop_ir import For, Load
    from polytile.schedule.passes.loops import unroll

    i, j, ty = Var("int64", "i"), Var("int64", "j"), Var("int64", "ty")
    a = Buffer("A", (64, 64), "float32", "shared")
    c = Buffer("C", (16,), "float32", "local")
    p = Binary("int64", "add", Binary("int64", "mul", ty, Const("int64", 8)), i)
    q = Binary("int64", "add", Binary("int64", "mul", ty, Const("int64", 2)), j)
    # p twice in the value (one slot), q in the store's index and in the value (two slots)
    body = Store(c, (q,), Binary("float32", "add", Load("float32", c, (q,)), Binary(
        "float32", "mul", Load("float32", a, (p, j)), Load("float32", a, (p, i)))))
    nest = For(i, Const("int64", 0), Const("int64", 3), LoopKind.UNROLLED,
               For(j, Const("int64", 0), Const("int64", 2), LoopKind.UNROLLED, body))
    sp.forget()
    out = sp.simplify(unroll(nest))
    # reference: what one walker per expression gives (the code before the slot walkers)
    from polytile.te.visitor import substitute

    ref = []
    for vi in range(3):
        for vj in range(2):
            m = {i: Const("int64", vi), j: Const("int64", vj)}
            idx = tuple(sp.simplify_expr(substitute(x, m)) for x in body.indices)
            ref.append(Store(c, idx, sp.simplify_expr(substitute(body.value, m))))
    assert [str(s) for s in out.stmts] == [str(s) for s in ref]
    assert _ids_within(out)[1:] == [_ids_within(s)[0] for s in ref]
    # p stays shared within the value of each copy
    assert all(len(set(pat)) < len(pat) for pat in _ids_within(out)[1:])
    sp.forget()


def test_pipeline_used_outside_counts_only_outside_the_loop():
    from polytile.schedule.kinds import LoopKind
    from polytile.schedule.loop_ir import For, Load
    from polytile.schedule.passes.software_pipeline import _used_outside

    k = Var("int64", "k")
    sh = Buffer("S", (16,), "float32", "shared")
    other = Buffer("T", (16,), "float32", "shared")
    loop = For(k, Const("int64", 0), Const("int64", 4), LoopKind.SERIAL,
               Store(sh, (k,), Load("float32", other, (k,))))
    assert _used_outside(seq(loop), loop, [sh]) is None
    before = Store(other, (Const("int64", 0),), Load("float32", sh, (Const("int64", 1),)))
    assert _used_outside(seq(before, loop), loop, [sh]) is sh
    assert _used_outside(seq(before, loop), loop, [other]) is other
    # the loop met twice (a shared statement) or not at all (rebuilt): counted both ways
    assert _used_outside(seq(loop, loop), loop, [sh]) is sh
    copy = For(k, Const("int64", 0), Const("int64", 4), LoopKind.SERIAL, loop.body)
    assert _used_outside(seq(copy), loop, [sh]) is None
    assert _used_outside(seq(before, copy), loop, [sh]) is sh


def test_share_remembers_loads_across_statements_only():
    """``share_subexpressions`` takes a load's nodes from the statement that met it first
    (``_reached_twice``'s ``loads``): a load reused by the next statement binds nothing,
    but an index node that two loads of one statement share, or a load read twice by one
    statement, is still bound once."""
    from polytile.schedule.loop_ir import LetStmt, Load
    from polytile.schedule.passes.share import share_subexpressions

    i = Var("int64", "i")
    a = Buffer("A", (64,), "float32", "global")
    b = Buffer("B", (64,), "float32", "global")
    c = Buffer("C", (64,), "float32", "global")
    idx = Binary("int64", "add", i, Const("int64", 1))
    la, lb = Load("float32", a, (idx,)), Load("float32", b, (idx,))
    alone = Load("float32", a, (Binary("int64", "mul", i, Const("int64", 2)),))
    s0 = Store(c, (i,), Binary("float32", "mul", alone, Const("float32", 2.0)))
    s1 = Store(c, (i,), Binary("float32", "add", alone, Const("float32", 1.0)))
    s2 = Store(c, (i,), Binary("float32", "add", la, lb))      # idx reached twice
    s3 = Store(c, (i,), Binary("float32", "mul", alone, alone))   # a load twice
    out = share_subexpressions(seq(s0, s1, s2, s3)).stmts
    assert out[0] is s0 and out[1] is s1
    assert isinstance(out[2], LetStmt) and out[2].value is not None
    assert "cse" in str(out[2]) and "cse" in str(out[3])


def test_finalize_simplifies_flat_offsets_as_the_two_passes_did():
    """``finalize`` builds the flat offsets simplified (one walker for flatten and the
    last simplify): the text is that of flatten, then simplify."""
    from polytile import te
    from polytile.schedule.passes.storage import flatten_storage
    from polytile.schedule.pipeline import finalize, lower

    A = te.placeholder((31, 17), name="A")
    B = te.compute((31, 17), lambda x, y: A[x, y] * 2.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].unroll(xi)
    func = lower(s, [A, B])
    flat = flatten_storage(func)
    sp.forget()
    want = str(sp.simplify(flat.body, share=True))
    sp.forget()
    assert str(finalize(func).body) == want
