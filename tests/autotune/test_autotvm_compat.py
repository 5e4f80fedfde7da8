"""``polytile.autotvm``: TVM's AutoTVM tutorial (``tune_simple_template.py``) with ``tvm``
replaced by ``polytile``, at an odd size, through the thin adapter over
``polytile.autotune.tune``; and the adapter's refusals."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import polytile
from polytile import autotvm, te
from polytile.errors import TuneError
from polytile.target import Target


@autotvm.template("test_autotvm_compat/matmul")
def matmul(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    k = s[C].op.reduce_axis[0]
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, k, yi, xi)
    cfg.add_flop(2 * N * L * M)
    return s, [A, B, C]


N, L, M = 13, 7, 9   # odd: every split of 13 and 9 leaves a partial tile
FAST = dict(number=1, repeat=1, min_repeat_ms=1, timeout=20)


def _options():
    return autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=1),
                                  runner=autotvm.LocalRunner(**FAST))


def test_task_create_takes_the_dtype_last():
    task = autotvm.task.create("test_autotvm_compat/matmul", args=(N, L, M, "float64"),
                               target="llvm")
    assert task.args == (N, L, M) and task.dtype == "float64"
    assert task.flop == 2 * N * L * M
    assert len(task.config_space) == 2 * 3   # factors of 13 (1, 13) and of 9 (1, 3, 9)
    assert "tile_y" in str(task.config_space)


@pytest.mark.parametrize("tuner_cls", [autotvm.tuner.XGBTuner, autotvm.tuner.RandomTuner,
                                       autotvm.tuner.GridSearchTuner])
def test_tutorial_tune_log_and_apply_history_best(tuner_cls, tmp_path, capsys):
    log = str(tmp_path / "matmul.log")
    task = autotvm.task.create("test_autotvm_compat/matmul", args=(N, L, M, "float32"),
                               target="llvm")
    seen = []

    def mine(tuner, inputs, results):
        seen.append((inputs[0].config, results[0].error_no, results[0].costs))

    tuner = tuner_cls(task)
    tuner.tune(n_trial=3, measure_option=_options(),
               callbacks=[autotvm.callback.log_to_file(log), mine,
                          autotvm.callback.progress_bar(3, prefix="[matmul]")])
    assert "Progress: (3/3)" in capsys.readouterr().out
    assert len(seen) == 3 and all(e == autotvm.MeasureErrorNo.NO_ERROR for _, e, _ in seen)
    assert all(isinstance(c, autotvm.ConfigEntity) for c, _, _ in seen)
    lines = [json.loads(x) for x in open(log)]
    assert len(lines) == 3 and {x["workload"]["template"] for x in lines} == {
        "test_autotvm_compat/matmul"}
    assert tuner.best_config is not None and tuner.best_flops > 0
    assert tuner.best_config.knob_values() == tuner.result.best.config
    assert tuner.best_measure_pair[0].config is tuner.best_config
    # the tutorial's last step: the best record, built and checked against numpy
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # a record is found: no fallback warning
        with autotvm.apply_history_best(log):
            with Target("llvm"):
                s, arg_bufs = matmul(N, L, M, "float32")
                func = polytile.build(s, arg_bufs)
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (N, L)).astype("float32")
    b = rng.uniform(-1, 1, (L, M)).astype("float32")
    c = np.full((N, M), np.nan, "float32")
    func(a, b, c)
    np.testing.assert_allclose(c, a.astype("float64") @ b.astype("float64"), rtol=1e-5,
                               atol=1e-5)
    # record.load_from_file / pick_best read the same file
    pairs = list(autotvm.record.load_from_file(log))
    assert len(pairs) == 3 and pairs[0][0].task.template == "test_autotvm_compat/matmul"
    assert autotvm.record.pick_best(log, str(tmp_path / "best.log")) == 1


def test_xgb_load_history_trains_on_a_records_file(tmp_path):
    log = str(tmp_path / "a.log")
    task = autotvm.task.create("test_autotvm_compat/matmul", args=(N, L, M, "float32"),
                               target="llvm")
    autotvm.tuner.RandomTuner(task).tune(2, _options(),
                                         callbacks=[autotvm.callback.log_to_file(log)])
    tuner = autotvm.tuner.XGBTuner(task, loss_type="rank")
    tuner.load_history(autotvm.record.load_from_file(log))
    tuner.tune(n_trial=1, measure_option=_options())
    assert tuner.result.n_trials == 1
    with pytest.raises(TuneError, match="load_history: data of type list; expected "
                       r"autotvm.record.load_from_file\(path\)"):
        tuner.load_history([])


def test_refusals_name_what_to_use(tmp_path):
    task = autotvm.task.create("test_autotvm_compat/matmul", args=(N, L, M, "float32"))
    with pytest.raises(TuneError, match="GATuner: polytile has no model-free genetic search; "
                       r"expected XGBTuner\(task\)"):
        autotvm.tuner.GATuner(task)
    with pytest.raises(TuneError, match="(?s)RPCRunner.*hint: .*ray="):
        autotvm.RPCRunner("rk3399", host="127.0.0.1", port=9190)
    with pytest.raises(TuneError, match="measure_option: runner='rpc'"):
        autotvm.measure_option(builder="local", runner="rpc")
    with pytest.raises(TuneError, match="XGBTuner: loss_type='hinge'"):
        autotvm.tuner.XGBTuner(task, loss_type="hinge")
    with pytest.raises(TuneError, match="RandomTuner.load_history: this tuner has no model"):
        autotvm.tuner.RandomTuner(task).load_history([])
    with pytest.raises(TuneError, match="XGBTuner: task of type str"):
        autotvm.tuner.XGBTuner("test_autotvm_compat/matmul")
    with pytest.raises(TuneError, match="log_to_file: file_out of type"):
        autotvm.callback.log_to_file(open(tmp_path / "x.log", "w"))
    # an AutoTVM log (or any non-records file) is refused before any trial runs
    tvm_log = tmp_path / "tvm.log"
    tvm_log.write_text('{"input": ["llvm", "tutorial/matmul", [512, 512, 512, "float32"], '
                       '{}], "config": {"index": 3, "code_hash": null, "entity": []}, '
                       '"result": [[0.1], 0, 1.0, 1.0], "version": 0.2, "tvm_version": '
                       '"0.19.0"}\n')
    seen = []
    with pytest.raises(TuneError, match="tvm.log"):
        autotvm.tuner.RandomTuner(task).tune(
            2, _options(), callbacks=[autotvm.callback.log_to_file(str(tvm_log)),
                                      lambda *a: seen.append(a)])
    assert seen == []
    with pytest.raises(TuneError, match="unknown template 'nope/matmul'"):
        autotvm.task.create("nope/matmul", args=(1,))
    with pytest.raises(TuneError, match="workload argument 'float32'; an int"):
        autotvm.task.create("test_autotvm_compat/matmul", args=(N, L, "float32"))


@autotvm.template("test_autotvm_compat/bias_exp")
def bias_exp(n, m, dtype):
    A = te.placeholder((n, m), name="A", dtype=dtype)
    k = te.reduce_axis((0, m), name="k")
    S = te.compute((n,), lambda i: te.sum(A[i, k] * 2.0, axis=k), name="S")
    E = te.compute((n,), lambda i: te.exp(S[i] + 1.0), name="E")
    s = te.create_schedule(E.op)
    cfg = autotvm.get_config()
    cfg.define_split("tile", E.op.axis[0], num_outputs=2)
    cfg["tile"].apply(s, E, E.op.axis[0])
    return s, [A, E]


def test_task_flop_counts_the_computes_without_add_flop():
    # TVM's compute_flop: S: 11 * 5 * (mul + add), E: 11 * (add + exp); index math is free
    task = autotvm.task.create("test_autotvm_compat/bias_exp", args=(11, 5, "float32"))
    assert task.flop == 11 * 5 * 2 + 11 * 2
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0, name="B")
    assert autotvm.task.compute_flop([B]) == 0      # symbolic: unknown
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: te.if_then_else(A[i] > 0, A[i] * 2.0 + 1.0, A[i]), name="B")
    assert autotvm.task.compute_flop([B]) == 4 * (1 + 2)   # the compare, the larger branch


@autotvm.template("test_autotvm_compat/fallback")
def fallback_tiles(n, m, dtype):
    A = te.placeholder((n, m), name="A", dtype=dtype)
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    cfg = autotvm.get_config()
    cfg.define_split("tile_x", B.op.axis[1], num_outputs=3)
    cfg.define_split("tile_y", B.op.axis[0], num_outputs=2)
    if cfg.is_fallback:     # AutoTVM's way of giving a default without a record
        cfg.fallback_split("tile_x", [-1, 4, 6])
        cfg["tile_y"] = autotvm.task.space.SplitEntity([-1, 5])
    cfg["tile_x"].apply(s, B, B.op.axis[1])
    cfg["tile_y"].apply(s, B, B.op.axis[0])
    fallback_tiles.seen = (cfg["tile_x"].size, cfg["tile_y"].size)
    return s, [A, B]


def test_fallback_split_and_setitem_on_a_fallback_config():
    # 60 columns: the innermost loop gets the largest divisor <= 6 (6), the middle one the
    # largest divisor of 10 <= 4 (2); TVM's FallbackConfigEntity.fallback_split
    with pytest.warns(polytile.autotune.FallbackWarning):
        s, args = fallback_tiles(15, 60, "float32")
    assert fallback_tiles.seen == ([-1, 2, 6], [-1, 5])
    f = polytile.build(s, args)
    a, b = np.random.default_rng(0).uniform(-1, 1, (15, 60)).astype("float32"), None
    b = np.full((15, 60), np.nan, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, a * 2)
    space = autotvm.task.create("test_autotvm_compat/fallback", args=(15, 60, "float32")
                                ).config_space
    tuned = space.get(len(space) - 1)
    with pytest.raises(TuneError, match=r"fallback_split: knob 'tile_x' of a config chosen by "
                       r"the tuner or a record; expected a fallback config"):
        tuned.fallback_split("tile_x", [-1, 4, 6])
