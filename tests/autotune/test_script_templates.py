"""A template registered with ``@autotune.template("name")`` in the user's own script
(AutoTVM's way) and tuned by that name: the worker processes did not know the name
("a worker process failed to load ...: unknown template"). They now import the file that
registered it; a file that tunes at import time (no ``__main__`` guard) is refused
instead of tuning again in every worker. The template's function called with its dtype
positionally, as AutoTVM code does, takes it as the dtype."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import polytile
from polytile import autotune, te
from polytile.errors import TuneError

TEMPLATE = '''
import numpy as np
import polytile
from polytile import autotune, te


@autotune.template("script/scale")
def scale(n, m, dtype):
    A = te.placeholder((n, m), name="A", dtype=dtype)
    B = te.compute((n, m), lambda i, j: A[i, j] * 3.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    cfg = autotune.get_config()
    cfg.define_split("tile", B.op.axis[1], num_outputs=2)
    cfg["tile"].apply(s, B, B.op.axis[1])
    return s, [A, B]


def main(log):
    opt = autotune.MeasureOptions(parallel=1, number=1, repeat=1, min_repeat_ms=1)
    res = autotune.tune("script/scale", (7, 13), dtype="float64", tuner="random", n_trial=2,
                        measure_option=opt, log_file=log)
    assert res.n_trials == 2 and res.best is not None, res
    with autotune.apply_history_best(log):
        s, args = scale(7, 13, "float64")
    a = np.random.default_rng(0).uniform(-1, 1, (7, 13))
    b = np.full((7, 13), np.nan)
    polytile.build(s, args)(a, b)
    np.testing.assert_allclose(b, a * 3.0 + 1.0, rtol=1e-15)
    print("tuned by name", res.best.config)
'''


def _run(tmp_path, tail: str) -> subprocess.CompletedProcess:
    script = tmp_path / "my_template.py"
    script.write_text(TEMPLATE + textwrap.dedent(tail))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)


def test_template_of_a_script_tuned_by_its_registered_name(tmp_path):
    log = tmp_path / "scale.jsonl"
    p = _run(tmp_path, f'''
        if __name__ == "__main__":
            main({str(log)!r})
        ''')
    assert p.returncode == 0, p.stderr
    assert "tuned by name" in p.stdout


def test_template_without_a_source_file_is_refused_before_any_worker(tmp_path):
    # piped to `python -` (as a notebook cell): the workers failed with "unknown
    # template 'script/scale'", which did not say why
    log = tmp_path / "scale.jsonl"
    code = TEMPLATE + textwrap.dedent(f'''
        main({str(log)!r})
        ''')
    p = subprocess.run([sys.executable, "-"], input=code, capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert p.returncode != 0
    assert ("tune: template 'script/scale' was registered by code without a source file "
            "(module '__main__'") in p.stderr
    assert "a worker process failed" not in p.stderr and not log.exists()


def test_script_tuning_at_import_time_is_refused_in_the_workers(tmp_path):
    p = _run(tmp_path, f'''
        main({str(tmp_path / "x.jsonl")!r})
        ''')
    assert p.returncode != 0
    assert "tune: called while" in p.stderr and "if __name__ == " in p.stderr


@autotune.template("test_script_templates/add")
def add(n, dtype):
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute((n,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    cfg = autotune.get_config()
    cfg.define_split("t", B.op.axis[0], num_outputs=2)
    cfg["t"].apply(s, B, B.op.axis[0])
    return s, [A, B]


@autotune.template("test_script_templates/flop")
def counted(n, dtype="float32"):
    A = te.placeholder((n, n), name="A", dtype=dtype)
    k = te.reduce_axis((0, n), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    cfg = autotune.get_config()
    cfg.define_split("t", cfg.axis(B.op.axis[0]), policy="verbose", num_outputs=2)
    cfg["t"].apply(s, B, B.op.axis[0])
    cfg.add_flop(2 * n * n)   # AutoTVM's way of giving the work (no flops= above)
    return s, [A, B]


def test_add_flop_gives_the_tuning_its_gflops():
    opt = autotune.MeasureOptions(parallel=1, number=1, repeat=1, min_repeat_ms=1)
    res = autotune.tune("test_script_templates/flop", (13,), tuner="random", n_trial=2,
                        measure_option=opt)
    assert res.flops == 2 * 13 * 13 and res.gflops() > 0


def test_dtype_given_positionally_to_the_template_function():
    with pytest.warns(autotune.FallbackWarning, match=r"polytile.autotune.tune\("
                      r"'test_script_templates/add', \(5,\), dtype='float64'"):
        s, (A, B) = add(5, "float64")
    assert A.dtype == B.dtype == "float64"
    f = polytile.build(s, [A, B])
    a, b = np.arange(5.0), np.full(5, np.nan)
    f(a, b)
    np.testing.assert_array_equal(b, a + 1)


def test_dtype_among_the_tuning_arguments_gets_a_hint():
    with pytest.raises(TuneError, match=r"(?s)takes 1 arguments \(n\) but 2 were given.*"
                       r"hint: give the dtype apart: dtype='float64'"):
        autotune.tune("test_script_templates/add", (5, "float64"), n_trial=1)


def test_autotvm_nesting_with_target_context(tmp_path):
    # AutoTVM's tutorials: with apply_history_best(log): with tvm.target.Target("llvm"):
    #     s, args = template(...); func = tvm.build(s, args)
    # (Target had no context manager: TypeError)
    from polytile.target import Target

    log = str(tmp_path / "add.jsonl")
    opt = autotune.MeasureOptions(parallel=1, number=1, repeat=1, min_repeat_ms=1)
    res = autotune.tune("test_script_templates/add", (37,), dtype="float64", tuner="random",
                        n_trial=2, measure_option=opt, log_file=log)
    assert Target.current() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", autotune.FallbackWarning)   # the record is found
        with autotune.apply_history_best(log) as ctx:
            with Target("llvm") as tgt:
                assert Target.current() is tgt and ctx.target.startswith("llvm")
                s, args = add(37, "float64")
                f = polytile.build(s, args)
    assert Target.current() is None
    a, b = np.arange(37.0), np.full(37, np.nan)
    f(a, b)
    np.testing.assert_array_equal(b, a + 1)
    with Target("cuda"):    # build without a target: the current one
        assert autotune.context.default_target().startswith("cuda")
        with pytest.raises(polytile.ScheduleError, match="needs GPU kernels"):
            polytile.build(s, args)
    assert res.best is not None
