"""The fused row templates (softmax, layernorm, rmsnorm): every config of a small space and
the default plus one-knob variations at awkward sizes (size 1, prime row lengths, splits
that do not divide) against numpy in float64 on poisoned outputs; softmax on rows of huge
values (no overflow), and NaN/inf rows of all three behaving like numpy (NaN where numpy's
float32 result has NaN, its values elsewhere)."""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile.autotune import get_template

NAMES = ("softmax", "layernorm", "rmsnorm")
RTOL = 2e-5


def _inputs(name, m, n, rng):
    a = rng.uniform(-3, 3, (m, n)).astype("float32")
    if name == "softmax":
        return [a]
    g = rng.uniform(0.5, 1.5, n).astype("float32")
    if name == "rmsnorm":
        return [a, g]
    return [a, g, rng.uniform(-1, 1, n).astype("float32")]


def _run(t, cfg, args, ins):
    s, tensors = t.instantiate(cfg, args)
    f = polytile.build(s, tensors, target="llvm")
    out = np.full(args, np.nan, dtype="float32")
    f(*ins, out)
    return out


def _check(name, out, ins, args):
    t = get_template(name)
    ref = t.reference(*[x.astype("float64") for x in ins], args=args)
    scale = 1.0 if name == "softmax" else np.abs(ref).max()
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=RTOL * scale)


def _configs(sp, every: bool):
    """The default, then every config (``every``) or the default with each knob changed
    to each of its other values."""
    default = sp.get(sp.default_index())
    if every:
        return [default] + [sp.get(k) for k in range(len(sp)) if k != sp.default_index()]
    out = [default]
    base = default.knob_values()
    for k in range(len(sp)):
        c = sp.get(k)
        if sum(v != base[n] for n, v in c.knob_values().items()) == 1:
            out.append(c)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_every_config_of_a_small_space(name):
    t = get_template(name)
    args = (7, 131)
    sp = t.space(args)
    ins = _inputs(name, *args, np.random.default_rng(7))
    for cfg in _configs(sp, every=True):
        _check(name, _run(t, cfg, args, ins), ins, args)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("args", [(1, 1), (1, 7), (4, 17), (3, 64), (2, 257), (5, 1000)])
def test_default_and_knob_variants_at_odd_sizes(name, args):
    t = get_template(name)
    sp = t.space(args)
    ins = _inputs(name, *args, np.random.default_rng(args[0] * 31 + args[1]))
    cfgs = _configs(sp, every=False)
    assert len(cfgs) > 1 or len(sp) == 1
    for cfg in cfgs:
        _check(name, _run(t, cfg, args, ins), ins, args)


def test_default_is_the_fused_vectorized_schedule():
    t = get_template("softmax")
    args = (64, 4096)
    sp = t.space(args)
    cfg = sp.get(sp.default_index())
    s, tensors = t.instantiate(cfg, args)
    text = str(polytile.lower(s, tensors))
    assert "rowmax.rf" in text and "rowsum.rf" in text and "vectorized(0, 64)" in text
    assert "parallel" in text
    big = t.space((4096, 4096))
    s, tensors = t.instantiate(big.get(big.default_index()), (4096, 4096))
    ll = polytile.build(s, tensors, target="llvm").get_source("ll")
    assert "!nontemporal" in ll and "llvm.prefetch" in ll


@pytest.mark.parametrize("name,args", [("softmax", (3, 257)), ("softmax", (5, 1000)),
                                       ("layernorm", (2, 4096)), ("rmsnorm", (3, 257))])
def test_next_row_prefetch(name, args):
    """The fused schedule prefetches the next row of A in the first pass after the
    reductions that reads A (softmax: the exponential; layernorm/rmsnorm: the output), one
    row of column tiles ahead; the values stay those of numpy, ragged and prime row
    lengths included. Rows shorter than PREFETCH_ROW_BYTES, and the unfused schedule
    (fuse_rows=False), get no prefetch."""
    from polytile.autotune import templates_nn

    t = get_template(name)
    ins = _inputs(name, *args, np.random.default_rng(args[1]))
    sp = t.space(args)
    cfg = sp.get(sp.default_index())
    s, tensors = t.instantiate(cfg, args)
    lines = [x for x in str(polytile.lower(s, tensors)).splitlines() if "prefetch" in x]
    n_jo = -(-args[1] // cfg["tile_j"].size[-1])
    assert len(lines) == 1 and lines[0].startswith(f"    for j.outer in range(0, {n_jo}):")
    assert f"# pragma prefetch(A, offset={n_jo})" in lines[0], lines
    _check(name, _run(t, cfg, args, ins), ins, args)
    unfused = next(sp.get(k) for k in range(len(sp))
                   if sp.get(k).knob_values() == dict(cfg.knob_values(), fuse_rows=False))
    s, tensors = t.instantiate(unfused, args)
    assert "prefetch" not in str(polytile.lower(s, tensors))
    short = (3, templates_nn.PREFETCH_ROW_BYTES // 4 - 1)  # rows under PREFETCH_ROW_BYTES
    sp = t.space(short)
    s, tensors = t.instantiate(sp.get(sp.default_index()), short)
    assert "prefetch" not in str(polytile.lower(s, tensors))


@pytest.mark.parametrize("n", [64, 1000, 4096])
def test_row_reductions_combine_their_partials_as_a_tree(n):
    """The 64 lane-wise partials of each row reduction are combined 4 at a time (64 -> 16
    -> 4 -> 1: one further rfactor per level), not one after the other: the default
    config's buffers."""
    for name in NAMES:
        sp = get_template(name).space((3, n))
        cfg = sp.get(sp.default_index())
        assert cfg["red_lanes"].val == 64
        s, tensors = get_template(name).instantiate(cfg, (3, n))
        text = str(polytile.lower(s, tensors))
        for level, lanes in enumerate((64, 16, 4)):
            assert f".rf{'_' + str(level) if level else ''} = alloc(float32[{lanes}, 1]" \
                in text, (name, level)


def _special_rows(n):
    rows = [np.full(n, 1e30), np.full(n, -3e38), np.linspace(-3e38, 3e38, n),
            np.where(np.arange(n) % 3 == 0, 88.0, -88.0), np.where(np.arange(n) == n // 2,
                                                                   np.inf, 0.0),
            np.where(np.arange(n) % 2 == 0, -np.inf, 1.0), np.full(n, -np.inf),
            np.where(np.arange(n) == n - 1, np.nan, 0.5), np.full(n, 1e-40)]
    return np.array(rows, dtype="float32")


def _numpy32(name, ins):
    """numpy's own float32 computation, for the positions of NaN."""
    with np.errstate(all="ignore"):
        return get_template(name).reference(*ins, args=())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [1, 37, 160])
def test_special_rows_behave_like_numpy(name, n):
    t = get_template(name)
    a = _special_rows(n)
    if name != "softmax":  # squares of huge values overflow float32 (numpy's too)
        a = a[3:]
    m = a.shape[0]
    ins = _inputs(name, m, n, np.random.default_rng(n))
    ins[0] = a
    sp = t.space((m, n))
    for cfg in _configs(sp, every=False):
        out = _run(t, cfg, (m, n), ins)
        ref32 = _numpy32(name, ins)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref32), err_msg=str(cfg))
        if name == "softmax":  # no overflow: the float64 reference holds for every row
            with np.errstate(all="ignore"):
                ref = t.reference(*[x.astype("float64") for x in ins], args=())
        else:
            ref = ref32
        ok = ~np.isnan(ref32)
        np.testing.assert_allclose(out[ok], ref[ok], rtol=1e-4, atol=RTOL, err_msg=str(cfg))
