"""A config lowered for its loop-IR features (the model tuner's shortlist) is compiled from
that lowering when it is built, in the worker that kept it, instead of being lowered again;
the module built that way computes what the compute says."""

from __future__ import annotations

import numpy as np

from polytile.autotune import MeasureOptions, get_template
from polytile.autotune.measure import LOWERED_KEPT, LocalMeasurer
from polytile.autotune.template import Workload
from polytile.autotune.worker import _Worker

ARGS = (31, 48, 17)  # odd sizes: non-divisible splits


def _worker():
    return _Worker({"template": "matmul", "args": list(ARGS), "dtype": "float32",
                    "target": "llvm", "threads": 1, "seed": 0, "lowered_kept": LOWERED_KEPT})


def test_build_after_features_reuses_the_lowering_and_computes_matmul():
    w = _worker()
    space = get_template("matmul").space(ARGS, "float32", "llvm")
    knobs = space.default().knob_values()
    _, _, code, _, feats = w.features(7, knobs)
    assert code is None and feats

    def no_lowering(_):
        raise AssertionError("lowered again")
    w._lower = no_lowering
    _, _, code, msg, _, feats2, trace, _ = w.build(7, knobs, True)
    assert code is None, msg
    assert feats2 == feats and trace
    # the kept function is used once: a second build of the config lowers again
    assert not w.lowered
    # the module built from the kept lowering computes A @ B (outputs poisoned first)
    a, b, c = (np.array(x, copy=True) for x in w.data)
    a[:] = np.random.default_rng(1).uniform(-1, 1, a.shape)
    b[:] = np.random.default_rng(2).uniform(-1, 1, b.shape)
    c[:] = np.nan
    w.mods[7](a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_kept_lowerings_are_bounded():
    w = _worker()
    space = get_template("matmul").space(ARGS, "float32", "llvm")
    w._lower = lambda knobs: (None, "", object(), [], [])
    import polytile.autotune.worker as worker

    real = worker.extract_features
    worker.extract_features = lambda func, sizes: [0.0]
    try:
        for i in range(LOWERED_KEPT + 5):
            w.features(i, space.get(i).knob_values())
    finally:
        worker.extract_features = real
    assert len(w.lowered) == LOWERED_KEPT


def test_measurer_sends_a_build_to_the_worker_that_lowered_it():
    space = get_template("matmul").space(ARGS, "float32", "llvm")
    items = [(i, space.get(i).knob_values()) for i in (space.default_index(), 1, 2)]
    m = LocalMeasurer(Workload("matmul", ARGS, "float32"), "llvm",
                      MeasureOptions(parallel=1, threads=1))
    try:
        got = m.features(items)
        ok = [cid for cid, (f, code, _) in got.items() if code is None]
        assert ok and all(cid in m._procs[0].lowered for cid in ok)
        built = m.build(items[:1])
        assert built[items[0][0]].error is None
        assert items[0][0] not in m._procs[0].lowered
    finally:
        m.close()
