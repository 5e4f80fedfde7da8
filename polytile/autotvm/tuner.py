"""AutoTVM's tuners (``autotvm.tuner.XGBTuner``, ``RandomTuner``, ``GridSearchTuner``) as
names of polytile's tuners: ``tuner.tune(...)`` is one :func:`polytile.autotune.tune` call.

The search itself is polytile's (:mod:`polytile.autotune.tuner`): ``XGBTuner`` is the
``"model"`` tuner (gradient-boosted trees on loop-IR features guiding an evolutionary
search, AutoTVM's design); its AutoTVM options (``loss_type``, ``feature_type``,
``plan_size``, ``optimizer``...) are checked and otherwise do not change it. Unlike
AutoTVM, the template's default config is measured first (a baseline the best never falls
below). A second ``tune`` call on the same tuner starts a new search (with ``XGBTuner``,
the model learns from the trials of ``load_history`` files only).
"""

from __future__ import annotations

import logging

from polytile import autotune
from polytile.errors import TuneError, format_error

from .callback import LogToFile
from .measure import MeasureInput, options_of, result_of
from .task import Task

# AutoTVM's logger: its tutorials set it to DEBUG to see every trial
_log = logging.getLogger("autotvm")


class Tuner:
    """Base of the AutoTVM tuner names; see the module docstring.

    Attributes (after ``tune``)
    ----------
    best_config : polytile.autotune.ConfigEntity or None
    best_flops : float
        FLOP/s of the best config (1/seconds where the task has no flop count).
    best_measure_pair : (MeasureInput, MeasureResult) or None
    result : polytile.autotune.TuneResult or None
        The whole run (records, stop reason, timings).
    """

    #: the polytile tuner (``"model"``, ``"random"``, ``"grid"``)
    kind = ""

    def __init__(self, task: Task, seed: int | None = 0):
        if not isinstance(task, Task):
            raise TuneError(format_error(
                f"autotvm.tuner.{type(self).__name__}", f"task of type {type(task).__name__}",
                "expected a task from autotvm.task.create(name, args, target)"))
        self.task = task
        self.seed = seed
        self.best_config = None
        self.best_flops = 0.0
        self.best_measure_pair = None
        self.result = None
        self.last_records: list = []
        self._transfer: list = []

    def load_history(self, data_set, min_seed_records: int = 500) -> None:
        """Learn from earlier trials before tuning (AutoTVM's transfer learning): only
        :class:`XGBTuner` does.

        Raises
        ------
        TuneError
            On this tuner; on ``XGBTuner``, for data that does not come from
            ``autotvm.record.load_from_file``.
        """
        raise TuneError(format_error(
            f"autotvm.tuner.{type(self).__name__}.load_history", "this tuner has no model to "
            "train", "expected XGBTuner(task).load_history(autotvm.record.load_from_file(log))"))

    def tune(self, n_trial: int, measure_option=None, early_stopping: int | None = None,
             callbacks=(), si_prefix: str = "G") -> None:
        """Measure up to ``n_trial`` configs (fewer when the space is smaller), calling
        each callback as ``callback(tuner, inputs, results)`` after every trial.

        Parameters
        ----------
        n_trial : int
        measure_option : dict, optional
            From :func:`polytile.autotvm.measure_option` (default: polytile's).
        early_stopping : int, optional
            Stop after that many trials without a better config.
        callbacks : sequence
            ``autotvm.callback.log_to_file(path)``, ``progress_bar(n)`` or functions.
        si_prefix : str
            Accepted for AutoTVM's signature (the progress bar takes its own).

        Raises
        ------
        TuneError
            For bad options, a log file that is no records file, or anything
            :func:`polytile.autotune.tune` refuses.
        """
        for cb in callbacks:
            if isinstance(cb, LogToFile):
                cb.check()
            elif not callable(cb):
                raise TuneError(format_error(
                    "autotvm tuner.tune", f"callback {cb!r} is not callable",
                    "expected functions (tuner, inputs, results) or autotvm.callback objects"))
        opt = options_of(measure_option)
        task = self.task
        best_cost = [None]

        def adapter(res, rec):
            self.last_records = [rec]
            cfg = task.config_space.from_json(rec.config)
            inputs = [MeasureInput(task.target, task, cfg)]
            results = [result_of(rec)]
            # the best by the record's cost (the median of its runs), as polytile ranks
            if rec.ok and (best_cost[0] is None or rec.cost < best_cost[0]):
                best_cost[0] = rec.cost
                self.best_config, self.best_measure_pair = cfg, (inputs[0], results[0])
                self.best_flops = (task.flop or 1.0) / rec.cost
            gflops = (task.flop or 1.0) / rec.cost / 1e9 if rec.ok else 0.0
            _log.debug("No: %d\tGFLOPS: %.2f/%.2f\tresult: %s\t%s", res.n_trials, gflops,
                       self.best_flops / 1e9, results[0], cfg)
            for cb in callbacks:
                cb(self, inputs, results)

        try:
            self.result = autotune.tune(
                task.template, task.args, dtype=task.dtype, target=task.target,
                tuner=self.kind, n_trial=n_trial, measure_option=opt,
                early_stopping=early_stopping, seed=self.seed, callbacks=[adapter],
                transfer_from=list(self._transfer) or None)
        finally:
            for cb in callbacks:
                if hasattr(cb, "done"):
                    cb.done()


class XGBTuner(Tuner):
    """TVM's ``autotvm.tuner.XGBTuner(task, plan_size=64, feature_type="itervar",
    loss_type="reg", num_threads=None, optimizer="sa", diversity_filter_ratio=None,
    log_interval=50)``: polytile's cost-model tuner (see the module docstring).

    Raises
    ------
    TuneError
        For a ``loss_type``, ``feature_type`` or ``optimizer`` AutoTVM does not have.
    """

    kind = "model"

    def __init__(self, task: Task, plan_size: int = 64, feature_type: str = "itervar",
                 loss_type: str = "reg", num_threads: int | None = None,
                 optimizer: str = "sa", diversity_filter_ratio: float | None = None,
                 log_interval: int = 50, seed: int | None = 0):
        for what, value, allowed in (
                ("loss_type", loss_type, ("reg", "rank", "rank-binary")),
                ("feature_type", feature_type, ("itervar", "knob", "curve")),
                ("optimizer", optimizer, ("sa",))):
            if value not in allowed:
                raise TuneError(format_error("autotvm.tuner.XGBTuner", f"{what}={value!r}",
                                             f"expected one of {', '.join(map(repr, allowed))}"))
        super().__init__(task, seed)

    def load_history(self, data_set, min_seed_records: int = 500) -> None:
        """Train the model on the trials of a records file before tuning: ``data_set`` is
        ``autotvm.record.load_from_file(path)`` (its records of this template, dtype and
        target; other shapes included, :mod:`polytile.autotune.transfer`).

        Raises
        ------
        TuneError
            For other data (AutoTVM's in-memory pairs have no file to learn from).
        """
        path = getattr(data_set, "filename", None)
        if path is None:
            raise TuneError(format_error(
                "autotvm.tuner.XGBTuner.load_history", f"data of type "
                f"{type(data_set).__name__}", "expected autotvm.record.load_from_file(path)"))
        self._transfer.append(path)


class RandomTuner(Tuner):
    """TVM's ``autotvm.tuner.RandomTuner(task, range_idx=None)``: configs drawn uniformly
    without repetition (polytile's ``"random"`` tuner).

    Raises
    ------
    TuneError
        For ``range_idx`` (a sub-range of the space is not supported).
    """

    kind = "random"

    def __init__(self, task: Task, range_idx=None, seed: int | None = 0):
        if range_idx is not None:
            raise TuneError(format_error("autotvm.tuner.RandomTuner", f"range_idx={range_idx}",
                                         "expected None (the whole space)"))
        super().__init__(task, seed)


class GridSearchTuner(Tuner):
    """TVM's ``autotvm.tuner.GridSearchTuner(task, range_idx=None)``: the configs in index
    order (polytile's ``"grid"`` tuner).

    Raises
    ------
    TuneError
        For ``range_idx``.
    """

    kind = "grid"

    def __init__(self, task: Task, range_idx=None, seed: int | None = 0):
        if range_idx is not None:
            raise TuneError(format_error("autotvm.tuner.GridSearchTuner",
                                         f"range_idx={range_idx}", "expected None (the whole space)"))
        super().__init__(task, seed)


def GATuner(*args, **kwargs):  # noqa: N802 (TVM's name)
    """TVM's genetic-algorithm tuner: refused with a ``TuneError``. polytile has one
    search, :class:`XGBTuner` (an evolutionary search guided by a cost model), and
    :class:`RandomTuner`."""
    raise TuneError(format_error(
        "autotvm.tuner.GATuner", "polytile has no model-free genetic search",
        "expected XGBTuner(task) (evolution guided by a cost model) or RandomTuner(task)"))


__all__ = ["GATuner", "GridSearchTuner", "RandomTuner", "Tuner", "XGBTuner"]
