"""AutoTVM's Python API (TVM v0.19 ``tvm.autotvm``) over polytile's one tuner.

A TVM tuning script runs with ``from polytile import autotvm`` in place of ``from tvm
import autotvm``::

    @autotvm.template("tutorial/matmul")
    def matmul(N, L, M, dtype):
        cfg = autotvm.get_config()
        ...
        return s, [A, B, C]

    task = autotvm.task.create("tutorial/matmul", args=(N, L, M, "float32"), target="llvm")
    print(task.config_space)
    measure_option = autotvm.measure_option(builder="local",
                                            runner=autotvm.LocalRunner(number=5))
    tuner = autotvm.tuner.XGBTuner(task)
    tuner.tune(n_trial=10, measure_option=measure_option,
               callbacks=[autotvm.callback.log_to_file("matmul.log")])
    with autotvm.apply_history_best("matmul.log"):
        with polytile.target.Target("llvm"):
            s, arg_bufs = matmul(N, L, M, "float32")

Every object here is a thin adapter: a task is a :class:`polytile.autotune.Workload` of a
registered template, ``tuner.tune`` is one call of :func:`polytile.autotune.tune`
(``XGBTuner`` its ``"model"`` tuner, ``RandomTuner`` ``"random"``,
``GridSearchTuner`` ``"grid"``), ``measure_option`` becomes its
:class:`~polytile.autotune.MeasureOptions` and ``log_to_file`` its records file. The
records are polytile's JSON Lines (read by ``apply_history_best`` and ``polytile records``);
AutoTVM's own log format is neither read nor written. What has no counterpart (RPC runners,
``GATuner``) raises a ``TuneError`` that names what to use instead.
"""

from __future__ import annotations

from polytile.autotune import (ConfigEntity, ConfigSpace, apply_history_best, get_config)

from . import callback, measure, record, task, tuner
from .measure import (LocalBuilder, LocalRunner, MeasureErrorNo, MeasureInput, MeasureResult,
                      RPCRunner, measure_option)
from .task import template

__all__ = ["ConfigEntity", "ConfigSpace", "LocalBuilder", "LocalRunner", "MeasureErrorNo",
           "MeasureInput", "MeasureResult", "RPCRunner", "apply_history_best", "callback",
           "get_config", "measure", "measure_option", "record", "task", "template", "tuner"]
