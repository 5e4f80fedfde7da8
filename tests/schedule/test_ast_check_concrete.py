"""The AST check by enumeration (``ast_check.concrete_mismatches``), the fallback of the
symbolic check for loop nests of constant sizes: it must agree with the symbolic check,
and find each kind of wrong loop nest (an instance missing, one outside the domain, one
run twice, per hardware index) on its own."""

from __future__ import annotations

from types import SimpleNamespace

import islpy as isl
import pytest

from polytile.schedule.ast_check import concrete_mismatches, mismatches


def _ast(schedule: str, context: str = "{ : }") -> isl.AstNode:
    build = isl.AstBuild.from_context(isl.Set(context))
    return build.node_from_schedule_map(isl.UnionMap(schedule))


def _both(ast, want: str, context: str = "{ : }", steps: int = 100_000):
    stmts = {"S": SimpleNamespace(exact=isl.Set(want))}
    ctx = isl.Set(context)
    return (mismatches(ast, stmts, ctx, lambda node: None),
            concrete_mismatches(ast, stmts, ctx, lambda node: None, steps))


# a tile of (7, 15) by (5, 2) with the outer loops fused: nested floor divisions
_TILED = ("{ S[i, k] -> [floor(i/5) * 8 + floor(k/2), i mod 5, k mod 2] : "
          "0 <= i < 7 and 0 <= k < 15 }")


def test_a_right_loop_nest_passes_both_checks():
    sym, con = _both(_ast(_TILED), "{ S[i, k] : 0 <= i < 7 and 0 <= k < 15 }")
    assert sym == [] and con == []


@pytest.mark.parametrize("want,words", [
    ("{ S[i, k] : 0 <= i < 8 and 0 <= k < 15 }", "S misses S[7, 0]"),
    ("{ S[i, k] : 0 <= i < 7 and 0 <= k < 14 }", "S runs S[0, 14], outside its domain"),
])
def test_missing_and_extra_instances_are_found(want, words):
    sym, con = _both(_ast(_TILED), want)
    assert sym and con == [words]


def test_an_instance_run_twice_is_found():
    ast = _ast("{ S[i] -> [t, i] : 0 <= i < 4 and i <= t <= i + 1 }")
    sym, con = _both(ast, "{ S[i] : 0 <= i < 4 }")
    assert sym and con == ["S runs S[0] twice"]


def test_hardware_indices_are_enumerated():
    """Each thread ``tx`` runs the instances ``i % 4 == tx``: right as a whole; without
    the condition every thread runs every instance (twice for the same instance across
    threads is fine, but one thread running the same instance twice is not)."""
    ctx = "[tx] -> { : 0 <= tx < 4 }"
    ok = _ast("[tx] -> { S[i] -> [floor(i/4)] : 0 <= i < 16 and i mod 4 = tx }", ctx)
    assert _both(ok, "{ S[i] : 0 <= i < 16 }", ctx)[1] == []
    short = _ast("[tx] -> { S[i] -> [floor(i/4)] : 0 <= i < 16 and i mod 4 = tx "
                 "and tx < 3 }", ctx)
    assert _both(short, "{ S[i] : 0 <= i < 16 }", ctx)[1] == ["S misses S[3]"]
    dup = _ast("[tx] -> { S[i] -> [t, i] : 0 <= i < 16 and i mod 4 = tx and "
               "i <= t <= i + 1 }", ctx)
    assert _both(dup, "{ S[i] : 0 <= i < 16 }", ctx)[1] == [
        "S runs S[0] twice (hardware indices {'tx': 0})"]


def test_symbolic_sizes_and_big_nests_are_left_to_the_symbolic_check():
    ast = _ast("[n] -> { S[i] -> [i] : 0 <= i < n }", "[n] -> { : n > 0 }")
    stmts = {"S": SimpleNamespace(exact=isl.Set("[n] -> { S[i] : 0 <= i < n }"))}
    assert concrete_mismatches(ast, stmts, isl.Set("[n] -> { : n > 0 }"),
                               lambda node: None) is None
    big = _ast(_TILED)
    stmts = {"S": SimpleNamespace(exact=isl.Set("{ S[i, k] : 0 <= i < 7 and 0 <= k < 15 }"))}
    assert concrete_mismatches(big, stmts, isl.Set("{ : }"), lambda node: None, 50) is None


def test_a_statement_without_dimensions():
    ast = _ast("{ S[] -> [] }")
    stmts = {"S": SimpleNamespace(exact=isl.Set("{ S[] }"))}
    assert concrete_mismatches(ast, stmts, isl.Set("{ : }"), lambda node: None) == []
    stmts = {"S": SimpleNamespace(exact=isl.Set("{ S[] : 1 = 0 }"))}
    assert concrete_mismatches(ast, stmts, isl.Set("{ : }"), lambda node: None) == [
        "S runs S[], outside its domain"]
