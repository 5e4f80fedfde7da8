"""Loop-IR features: fixed length, finite, and they see what the schedule did."""

from __future__ import annotations

import math

import pytest

from polytile.autotune import get_template
from polytile.autotune.features import KINDS, N_FEATURES, N_GLOBAL, PER_LEVEL, extract_features
from polytile.schedule.pipeline import finalize, lower

from test_templates import SMALL


def _features(name, args, knobs=None):
    t = get_template(name)
    sp = t.space(args)
    cfg = sp.default() if knobs is None else sp.from_json(knobs)
    s, tensors = t.instantiate(cfg, args)
    return extract_features(finalize(lower(s, tensors)))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_fixed_length_and_finite(name):
    f = _features(name, SMALL[name])
    assert len(f) == N_FEATURES and all(math.isfinite(x) for x in f)


def test_matmul_features_follow_the_schedule():
    args = (64, 64, 64)
    base = dict(get_template("matmul").space(args).default().knob_values(),
                tile_i=[-1, 8, 8], pack_a=False, pack_b=False, order="ij")
    f = _features("matmul", args, base)
    # innermost level: the vectorized j2 loop of 32 lanes
    assert f[1 + KINDS.index("vectorized")] == 1.0
    assert f[0] == pytest.approx(math.log2(33))
    g = N_FEATURES - N_GLOBAL
    assert f[g + 2] == pytest.approx(math.log2(9))  # 8 unrolled rows: 8 stores in the nest
    rolled = dict(base, unroll=["none", "none"])
    f2 = _features("matmul", args, rolled)
    assert f2[g + 2] == pytest.approx(1.0)  # one store
    assert f2[PER_LEVEL] != f[PER_LEVEL]  # level 1 is now the i2 loop, not k1
