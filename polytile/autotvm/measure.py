"""AutoTVM's measurement options (``measure_option``, ``LocalBuilder``, ``LocalRunner``)
and the ``MeasureInput``/``MeasureResult`` pairs its callbacks receive, mapped onto
:class:`polytile.autotune.MeasureOptions` and polytile's records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from polytile.autotune import MeasureOptions
from polytile.errors import TuneError, format_error


class MeasureErrorNo:
    """AutoTVM's error numbers of a ``MeasureResult`` (``error_no``)."""

    NO_ERROR = 0
    INSTANTIATION_ERROR = 1
    COMPILE_HOST = 2
    COMPILE_DEVICE = 3
    RUNTIME_DEVICE = 4
    WRONG_ANSWER = 5
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8


#: polytile's record error codes (:data:`polytile.autotune.ERROR_CODES`) -> AutoTVM's
_ERROR_NO = {None: MeasureErrorNo.NO_ERROR, "invalid_config": MeasureErrorNo.INSTANTIATION_ERROR,
             "build_error": MeasureErrorNo.COMPILE_HOST,
             "runtime_error": MeasureErrorNo.RUNTIME_DEVICE,
             "wrong_result": MeasureErrorNo.WRONG_ANSWER, "timeout": MeasureErrorNo.RUN_TIMEOUT}


class MeasureInput(NamedTuple):
    """What was measured: ``target`` (str), ``task`` (the :class:`~.task.Task`, or the
    :class:`polytile.autotune.Workload` for records read from a file) and ``config`` (a
    :class:`polytile.autotune.ConfigEntity`, or the record's knob dict)."""

    target: str
    task: object
    config: object


class MeasureResult(NamedTuple):
    """How it went: ``costs`` (seconds per run; on failure AutoTVM puts the error there:
    here the error text), ``error_no`` (:class:`MeasureErrorNo`), ``all_cost`` (seconds
    the trial took, build included) and ``timestamp`` (seconds since the epoch)."""

    costs: tuple
    error_no: int
    all_cost: float
    timestamp: float


def result_of(rec) -> MeasureResult:
    """The :class:`MeasureResult` of a polytile record."""
    costs = tuple(rec.costs) if rec.ok else (rec.error_msg or rec.error,)
    return MeasureResult(costs, _ERROR_NO.get(rec.error, MeasureErrorNo.UNKNOWN_ERROR),
                         float(rec.wall_s), float(rec.timestamp))


@dataclass(frozen=True)
class LocalBuilder:
    """TVM's ``autotvm.LocalBuilder(timeout=10, n_parallel=None, build_func="default")``:
    candidates are compiled in ``n_parallel`` worker processes (None: one per CPU core),
    each within ``timeout`` seconds.

    Raises
    ------
    TuneError
        For a ``build_func`` other than ``"default"`` (AutoTVM's ``"ndk"`` cross
        compilation has no counterpart).
    """

    timeout: float = 10.0
    n_parallel: int | None = None
    build_func: str = "default"
    do_fork: bool = False

    def __post_init__(self):
        if self.build_func != "default":
            raise TuneError(format_error(
                "autotvm.LocalBuilder", f"build_func={self.build_func!r}",
                "expected 'default' (candidates are built here, for the target of the task)"))


@dataclass(frozen=True)
class LocalRunner:
    """TVM's ``autotvm.LocalRunner(timeout=10, number=4, repeat=3, min_repeat_ms=0,
    cooldown_interval=0.1, enable_cpu_cache_flush=False)``: each candidate runs in a
    separate process, ``number`` calls per timed repeat (more when a repeat would last
    less than ``min_repeat_ms`` milliseconds), at least ``repeat`` repeats, within
    ``timeout`` seconds; ``enable_cpu_cache_flush`` overwrites the last-level cache before
    each repeat. ``cooldown_interval`` is accepted and not used (polytile re-measures a
    candidate whose spread is large instead of pausing)."""

    timeout: float = 10.0
    number: int = 4
    repeat: int = 3
    min_repeat_ms: float = 0.0
    cooldown_interval: float = 0.1
    enable_cpu_cache_flush: bool = False
    module_loader: object = None


def RPCRunner(*args, **kwargs):  # noqa: N802 (TVM's name)
    """TVM's ``autotvm.RPCRunner`` (devices behind an RPC tracker): refused with a
    ``TuneError``; polytile measures remote machines through Ray
    (``polytile.autotune.tune(..., ray="ray://host:port")``, ``polytile tune --ray``)."""
    raise TuneError(format_error(
        "autotvm.RPCRunner", "RPC trackers and device keys do not exist in polytile",
        "expected autotvm.LocalRunner(...) on this machine",
        hint="measure on other machines with polytile.autotune.tune(..., ray='ray://host:port')"))


def measure_option(builder="local", runner="local") -> dict:
    """TVM's ``autotvm.measure_option(builder, runner)``: ``{"builder": ..., "runner":
    ...}``, each ``"local"`` or a :class:`LocalBuilder` / :class:`LocalRunner`.

    Raises
    ------
    TuneError
        For anything else (``"rpc"``, other objects).
    """
    b = LocalBuilder() if builder == "local" else builder
    r = LocalRunner() if runner == "local" else runner
    if not isinstance(b, LocalBuilder):
        raise TuneError(format_error("autotvm.measure_option", f"builder={builder!r}",
                                     "expected 'local' or autotvm.LocalBuilder(...)"))
    if not isinstance(r, LocalRunner):
        raise TuneError(format_error("autotvm.measure_option", f"runner={runner!r}",
                                     "expected 'local' or autotvm.LocalRunner(...)"))
    return {"builder": b, "runner": r}


def options_of(option) -> MeasureOptions:
    """The :class:`polytile.autotune.MeasureOptions` of a :func:`measure_option` dict
    (None: polytile's defaults).

    Raises
    ------
    TuneError
        For anything but a :func:`measure_option` dict.
    """
    if option is None:
        return MeasureOptions()
    if not (isinstance(option, dict) and set(option) == {"builder", "runner"}):
        raise TuneError(format_error("autotvm tuner.tune", f"measure_option={option!r}",
                                     "expected the dict autotvm.measure_option(builder, runner) returns"))
    option = measure_option(option["builder"], option["runner"])
    b, r = option["builder"], option["runner"]
    base = MeasureOptions()
    return MeasureOptions(parallel=b.n_parallel or 0, number=r.number, repeat=r.repeat,
                          max_repeats=max(base.max_repeats, r.repeat),
                          min_repeat_ms=r.min_repeat_ms, flush_cache=r.enable_cpu_cache_flush,
                          build_timeout=b.timeout, run_timeout=r.timeout)
