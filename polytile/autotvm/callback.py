"""AutoTVM's tuning callbacks (``autotvm.callback``): ``log_to_file`` and
``progress_bar``. A callback is called as ``callback(tuner, inputs, results)`` after each
trial, with lists of :class:`~.measure.MeasureInput` and :class:`~.measure.MeasureResult`."""

from __future__ import annotations

import os
import statistics
import sys
import time

from polytile.autotune.records import RecordWriter, check_log_path
from polytile.errors import TuneError, format_error


class LogToFile:
    """Appends each trial to the polytile records file ``path`` (JSON Lines, what
    ``apply_history_best`` and ``polytile records`` read); made by :func:`log_to_file`."""

    def __init__(self, path):
        self.path = os.fspath(path)

    def check(self) -> None:
        """Refuse, before tuning starts, a file that exists and is no records file (an
        AutoTVM log, say): :func:`polytile.autotune.records.check_log_path`."""
        check_log_path(self.path)

    def __call__(self, tuner, inputs, results) -> None:
        w = RecordWriter(self.path)
        try:
            for rec in tuner.last_records:
                w.write(rec)
        finally:
            w.close()


def log_to_file(file_out, protocol: str = "json") -> LogToFile:
    """TVM's ``autotvm.callback.log_to_file(file_out, protocol="json")``: a callback that
    appends every trial to the records file ``file_out`` (a path). The records are
    polytile's JSON Lines, not AutoTVM's log lines.

    Raises
    ------
    TuneError
        For a file object or a ``protocol`` other than ``"json"``.
    """
    if protocol != "json":
        raise TuneError(format_error("autotvm.callback.log_to_file", f"protocol={protocol!r}",
                                     "expected 'json' (polytile's JSON Lines records)"))
    if not isinstance(file_out, (str, os.PathLike)):
        raise TuneError(format_error(
            "autotvm.callback.log_to_file", f"file_out of type {type(file_out).__name__}",
            "expected a path (str or os.PathLike): records are appended and flushed line by line"))
    return LogToFile(file_out)


class ProgressBar:
    """Prints ``Current/Best: x/y GFLOPS | Progress: (i/total) | t s`` after each trial
    and ``Done.`` at the end of ``tune``; made by :func:`progress_bar`."""

    _PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}

    def __init__(self, total: int, prefix: str = "", si_prefix: str = "G", stream=None):
        if si_prefix not in self._PREFIX:
            raise TuneError(format_error("autotvm.callback.progress_bar",
                                         f"si_prefix={si_prefix!r}",
                                         f"expected one of {sorted(self._PREFIX)}"))
        self.total, self.prefix, self.si_prefix = total, prefix, si_prefix
        self.stream = stream
        self.ct, self.best = 0, 0.0
        self.t0 = time.time()

    def __call__(self, tuner, inputs, results) -> None:
        scale = self._PREFIX[self.si_prefix]
        cur = 0.0
        for inp, res in zip(inputs, results):
            self.ct += 1
            if res.error_no == 0:
                flop = getattr(inp.task, "flop", 0.0) or 1.0
                # the median, as polytile ranks trials (AutoTVM shows the mean)
                cur = flop / statistics.median(res.costs) / scale
                self.best = max(self.best, cur)
        out = self.stream or sys.stdout
        out.write(f"\r{self.prefix} Current/Best: {cur:7.2f}/{self.best:7.2f} "
                  f"{self.si_prefix}FLOPS | Progress: ({self.ct}/{self.total}) | "
                  f"{time.time() - self.t0:.2f} s")
        out.flush()

    def done(self) -> None:
        out = self.stream or sys.stdout
        out.write(" Done.\n")
        out.flush()


def progress_bar(total: int, prefix: str = "", si_prefix: str = "G") -> ProgressBar:
    """TVM's ``autotvm.callback.progress_bar(total, prefix, si_prefix)``: a one-line
    progress display on stdout (FLOPS from the task's ``flop``; 1/seconds without one)."""
    return ProgressBar(total, prefix, si_prefix)
