"""Config spaces: every knob type, lazy indexing of huge spaces, JSON round trips."""

from __future__ import annotations

import math
import random

import pytest

from polytile.autotune import ConfigSpace, get_template
from polytile.autotune.space import (AnnotateSpace, ReorderSpace, SplitSpace, _index_of_perm,
                                     _perm_of_index)
from polytile.errors import TuneError


def test_split_factors_policy_lists_exact_factorizations():
    k = SplitSpace("t", 12, num_outputs=3)
    sizes = {tuple(k.get(i).size) for i in range(len(k))}
    for s in sizes:
        assert s[0] == -1 and 12 % (s[1] * s[2]) == 0
    assert (-1, 2, 3) in sizes and (-1, 3, 2) in sizes and (-1, 12, 1) in sizes
    # ordered factorizations of 12 = 2^2 * 3 into three parts: C(4,2) * C(3,2) = 18
    assert len(k) == 18


def test_split_power2_allows_tails_and_max_factor():
    k = SplitSpace("t", 100, num_outputs=2, policy="power2", max_factor=16)
    assert [e.size[1] for e in k.entities] == [1, 2, 4, 8, 16]


def test_split_candidate_filter_and_default_nearest():
    k = SplitSpace("t", 64, 2, policy="candidate", candidate=[[-1, 4], [-1, 16]])
    assert len(k) == 2 and k.get(1).size == [-1, 16]
    f = SplitSpace("t", 64, 2, filter=lambda e: e.size[1] >= 8)
    assert min(e.size[1] for e in f.entities) == 8
    d = SplitSpace("t", 48, 2, default=[-1, 32])  # 32 does not divide 48: nearest is 24
    assert d.get(d.default_index).size in ([-1, 24], [-1, 48])


def test_split_errors():
    with pytest.raises(TuneError, match="num_outputs=5"):
        SplitSpace("t", 8, 5)
    with pytest.raises(TuneError, match="unknown policy 'odd'"):
        SplitSpace("t", 8, 2, policy="odd")
    with pytest.raises(TuneError, match="has no choices"):
        SplitSpace("t", 8, 2, filter=lambda e: False)


def test_split_factors_of_an_odd_extent_refused_by_the_filter_fall_back_to_power2():
    # tutorials/03 --n 65: a vector width of 8, 16 or 32 over 65 columns (factors 1, 5,
    # 13, 65) left the knob empty; non-divisible splits are exact, so powers of two serve
    k = SplitSpace("tile_j", 65, 3, max_factor=64, filter=lambda e: e.size[-1] in (8, 16, 32),
                   default=[-1, 4, 32])
    assert k.policy == "power2" and len(k) > 0
    assert all(e.size[-1] in (8, 16, 32) and e.size[1] * e.size[2] <= 65 for e in k.entities)
    assert k.get(k.default_index).size == [-1, 2, 32]
    with pytest.raises(TuneError, match=r"knob 'tile_j' has no choices: no split of its axis "
                       r"of extent 65 into 2 loops \(policy 'factors', max_factor 64\) passes "
                       r"the filter; loosen max_factor or the filter"):
        SplitSpace("tile_j", 65, 2, max_factor=64, filter=lambda e: e.size[-1] == 128)


def test_autotvm_config_helpers():
    # AutoTVM templates call cfg.add_flop, cfg.axis/reduce_axis and policy="verbose"
    from polytile import te

    sp = ConfigSpace()
    A = te.placeholder((24,), name="A")
    k = te.reduce_axis((0, 20), "k")
    assert sp.axis(A.shape[0]) == 24 and sp.reduce_axis(k) is k
    sp.define_split("v", sp.reduce_axis(k), policy="verbose", num_outputs=2)
    sizes = sorted(e.size[1] for e in sp.knobs["v"].entities)
    assert sizes == [1, 2, 4, 5, 8, 10, 16, 20]   # the factors of 20 and the powers of two
    sp.add_flop(2 * 24 * 20)
    sp.add_flop(1)
    assert sp.flop == 961.0
    cfg = sp.get(0)
    cfg.add_flop(5)
    assert cfg.flop == 5.0 and sp.flop == 961.0


def test_split_apply_nests_loops():
    from polytile import te

    A = te.placeholder((24,), name="A")
    C = te.compute((24,), lambda i: A[i] + 1, name="C")
    s = te.create_schedule(C.op)
    k = SplitSpace("t", 24, 3, policy="candidate", candidate=[[-1, 3, 2]])
    axes = k.get(0).apply(s, C, C.op.axis[0])
    assert [s[C].extent_of(a) for a in axes] == [4, 3, 2]


@pytest.mark.parametrize("n", [1, 3, 5])
def test_permutation_index_round_trip(n):
    perms = [_perm_of_index(i, n) for i in range(math.factorial(n))]
    assert len({tuple(p) for p in perms}) == math.factorial(n)
    assert all(_index_of_perm(p) == i for i, p in enumerate(perms))


def test_reorder_policies():
    assert len(ReorderSpace("r", 4, "all")) == 24
    iv = ReorderSpace("r", 5, "interval", interval=(1, 3))
    assert len(iv) == 2
    assert [iv.get(i).perm for i in range(2)] == [[0, 1, 2, 3, 4], [0, 2, 1, 3, 4]]
    assert iv.index_of([0, 2, 1, 3, 4]) == 1 and iv.index_of([1, 0, 2, 3, 4]) is None
    c = ReorderSpace("r", 3, "candidate", candidate=[[2, 1, 0], [0, 1, 2]], default=[0, 1, 2])
    assert len(c) == 2 and c.default_index == 1
    with pytest.raises(TuneError, match="not a permutation"):
        ReorderSpace("r", 3, "candidate", candidate=[[0, 0, 1]])


def test_annotate_policies():
    u = AnnotateSpace("a", 2, "try_unroll")
    assert len(u) == 4 and u.get(3).anns == ["unroll", "unroll"]
    v = AnnotateSpace("a", 2, "try_vec")
    assert [v.get(i).anns for i in range(len(v))] == [["none", "none"], ["none", "vec"]]
    uv = AnnotateSpace("a", 2, "try_unroll_vec")
    assert len(uv) == 6
    assert all(uv.index_of(uv.get(i)) == i for i in range(6))
    with pytest.raises(TuneError, match="unknown policy"):
        AnnotateSpace("a", 2, "try_everything")


def _big_space() -> ConfigSpace:
    sp = ConfigSpace()
    sp.define_split("a", 2**20, num_outputs=4)
    sp.define_split("b", 720720, num_outputs=2)
    sp.define_reorder("r", list(range(9)), policy="all")
    sp.define_annotate("u", [0, 1, 2], policy="try_unroll_vec")
    sp.define_knob("k", [True, False, "x", 3])
    return sp


def test_huge_space_is_lazy_and_round_trips():
    sp = _big_space()
    assert len(sp) > 10**9
    rng = random.Random(0)
    for _ in range(200):
        i = rng.randrange(len(sp))
        cfg = sp.get(i)
        assert cfg.index == i
        assert sp.index_from_knobs(sp.knob_indices(i)) == i
        assert sp.from_json(cfg.knob_values()).index == i
    assert sp.get(len(sp) - 1).index == len(sp) - 1
    with pytest.raises(TuneError, match="out of range"):
        sp.get(len(sp))


def test_space_str_lists_knobs():
    text = str(_big_space())
    assert "ConfigSpace(" in text and "configs)" in text
    for name in ("a", "b", "r", "u", "k"):
        assert f"\n  {name} " in text


def test_knob_values_distinguish_bool_and_int():
    sp = ConfigSpace()
    sp.define_knob("k", [1, True, "1"])
    assert [sp.from_json({"k": v}).index for v in (1, True, "1")] == [0, 1, 2]


def test_from_json_errors():
    sp = _big_space()
    with pytest.raises(TuneError, match="do not match"):
        sp.from_json({"a": [-1, 1, 1, 1]})
    vals = sp.get(0).knob_values()
    vals["k"] = "nope"
    with pytest.raises(TuneError, match="value 'nope' of knob 'k' is not in the space"):
        sp.from_json(vals)


def test_legacy_knob_values_fill_records_that_lack_the_knob():
    sp = ConfigSpace()
    sp.define_knob("old", [1, 2, 3], default=2)
    sp.define_knob("new", ["a", "b", None], default="b", legacy=None)
    sp.define_knob("newer", [[1, 2], [3, 4]], default=[3, 4], legacy=[1, 2])
    assert sp.from_json({"old": 3}).knob_values() == {"old": 3, "new": None,
                                                      "newer": [1, 2]}
    assert sp.from_json({"old": 3, "new": "a"}).knob_values()["new"] == "a"  # named: kept
    assert sp.default().knob_values() == {"old": 2, "new": "b", "newer": [3, 4]}
    with pytest.raises(TuneError, match="do not match"):     # no legacy value: required
        sp.from_json({"new": "a"})
    with pytest.raises(TuneError, match="legacy value 5 of knob 'x' is not one of"):
        sp.define_knob("x", [1, 2], legacy=5)


def test_use_of_undefined_knob_is_an_error():
    with pytest.raises(TuneError, match="knob 'x' is used before it is defined"):
        ConfigSpace()["x"]


def test_template_space_and_default_config():
    t = get_template("matmul")
    sp = t.space((64, 64, 64))
    d = sp.default()
    assert d["tile_i"].size == [-1, 6, 12]  # 12-row micro-kernel, the 64 rows in 1 block
    assert d["tile_j"].size == [-1, 1, 32]  # B blocks of N/2 columns
    # 64^3 is small: no packing, no threads; larger products pack both and run in parallel
    assert (d["pack_a"].val, d["pack_b"].val, d["order"].val) == (False, False, "goto")
    assert d["parallel"].val == "none"
    d = t.space((96, 64, 64)).default()
    assert (d["pack_a"].val, d["pack_b"].val, d["parallel"].val) == (True, True, "i0.j0")
    assert len(sp) == math.prod(sp.dims())


def test_define_split_takes_autotvm_argument_order():
    sp = ConfigSpace()
    sp.define_split("t", 16, "power2", num_outputs=2)  # AutoTVM: (name, axis, policy, ...)
    assert sp.knobs["t"].policy == "power2" and len(sp) == 5


def test_multi_filter_restricts_the_search_as_autotvm():
    # AutoTVM's cfg.multi_filter(filter=lambda e: ...) on the entities of a config
    sp = ConfigSpace()
    sp.define_split("x", 12, num_outputs=2)
    sp.define_split("y", 10, num_outputs=2)
    sp.multi_filter(filter=lambda e: e["x"].size[-1] * e["y"].size[-1] <= 6)
    keep = sp.preferred()
    assert keep and len(keep) < len(sp)
    for i in keep:
        c = sp.get(i)
        assert c["x"].size[-1] * c["y"].size[-1] <= 6 or i == sp.default_index()
    assert sp.get(0).multi_filter(lambda e: False) is None   # a no-op on a config
