"""The check that a GPU loop nest runs every instance (``ast_check._covered``, with
``ThreadRole.one_thread``): decided by the thread the schedule gives each instance, and
by the projection over all threads (``_missing``) only where that thread does not run it."""

from __future__ import annotations

import islpy as isl

from polytile.autotune.template import get_template
from polytile.backend import Target
from polytile.schedule import ast_check
from polytile.schedule.pipeline import lower

P = "[bx, by, bz, tx, ty, tz]"


def _sets(one: str, ranges: list[str]):
    want = isl.Set("{ S[i] : 0 <= i < 8 }")
    return (want, [isl.Set(f"{P} -> {{ {r} }}") for r in ranges],
            isl.Set(f"{P} -> {{ {one} }}"))


def test_covered_by_the_bound_thread():
    want, ranges, one = _sets("S[i] : tx = i and bx = 0 and by = 0 and bz = 0 and ty = 0 "
                              "and tz = 0", ["S[i] : i = tx and 0 <= tx < 8"])
    assert ast_check._covered(want, ranges, one)
    assert ast_check._missing(want, ranges) is None


def test_not_covered_when_an_instance_is_missing():
    # thread 7 runs nothing: instance 7 is missing, whichever way it is checked
    want, ranges, one = _sets("S[i] : tx = i and bx = 0 and by = 0 and bz = 0 and ty = 0 "
                              "and tz = 0", ["S[i] : i = tx and 0 <= tx < 7"])
    assert not ast_check._covered(want, ranges, one)
    p = ast_check._missing(want, ranges)
    assert p is not None and p.get_coordinate_val(isl.dim_type.set, 0).to_python() == 7


def test_other_thread_falls_back_to_the_projection():
    # every instance runs, but on the thread after the one named: not decided by the
    # named thread; the projection over all threads finds nothing missing
    want, ranges, one = _sets("S[i] : tx = i and bx = 0 and by = 0 and bz = 0 and ty = 0 "
                              "and tz = 0", ["S[i] : i = tx - 1 and 1 <= tx < 9"])
    assert not ast_check._covered(want, ranges, one)
    assert ast_check._missing(want, ranges) is None


def test_grouped_gemm_store_checked_by_its_threads(monkeypatch):
    """The matmul template's tile [64, 128, 4, 4, 8] with group 4 at 512^2: the
    projection of its register-tile store over the threads has existential variables
    that made isl's subtraction run out of operations (refused as unverifiable); by the
    threads of the schedule, no statement needs the projection."""
    tgt = Target.parse("cuda")
    t = get_template("matmul")
    args = (512, 512, 8)
    sp = t.space(args, "float32", tgt)
    want = "tile=[64, 128, 4, 4, 8] vec=1 unroll_k=True layout=strided stages=3 group=4"
    cfg = next(sp.get(i) for i in range(len(sp)) if str(sp.get(i)) == want)
    s, a = t.instantiate(cfg, args, "float32", tgt)

    def projection(*_):
        raise AssertionError("a GPU statement checked by the projection over all threads")

    monkeypatch.setattr(ast_check, "_missing", projection)
    func = lower(s, a, target=tgt, stop_after=None, who="build")
    assert "main_kernel0" in str(func)
