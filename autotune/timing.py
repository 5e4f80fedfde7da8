"""The one timing routine of the tuner, of ``polytile run`` and of the anchors.

*The time of a call* is the wall-clock seconds of one call from Python as a user makes it,
measured as the mean of ``number`` consecutive calls: for a CPU kernel ``f(*arrays)``
(:meth:`~polytile.targets.llvm.runtime.LLVMModule.__call__`: the Python call, the
argument checks (those of the first call reused while the same unchanged arrays come
back, about 0.5 us for three arrays), the ctypes call and the kernel), writing into
preallocated outputs; for the numpy anchor its reference's call on the same inputs, into
a preallocated output when the reference takes ``out=`` (``np.matmul(a, b, out=c)``:
:func:`.data.reference_call`), with numpy's own call overhead; for torch its function
(which returns a new tensor). Both sides are timed with the same arrays on every call (warm
caches, unless ``flush``), by this routine, with the same options, in a process of their
own, alternately (:meth:`.measure.LocalMeasurer.compare`). So the tuner's summary,
``polytile run``, ``benchmarks/cpu_matmul.py`` and ``time_evaluator`` print the same
figure a user's own ``timeit`` of ``f(a, b, c)`` against ``np.matmul(a, b, out=c)``
gives; at small sizes the Python call overhead of each side is part of it (a 16^3
matmul: polytile's call 1.2 us, 0.35 of them the kernel and its ctypes call; numpy's
0.8 us). GPU kernels are timed on the device's
clock (CUDA events), without the host's call overhead.

The clock is the wall clock (``time.perf_counter``) unless the options say ``clock="cpu"``
(:data:`CLOCKS`): the process's CPU time (``time.process_time``, all its threads), which a
loaded machine does not inflate with the time other processes hold the core. With one
thread it is the time of the call on a quiet machine; with several it is their summed work,
not the elapsed time (a figure of efficiency, not of scaling).

Every figure polytile prints about a kernel's speed comes from :func:`time_calls`:

1. a *first call* (also the warm-up) is timed on its own;
2. from it, ``number`` (calls per repeat) is chosen so that one repeat lasts at least
   ``min_repeat_ms`` and ``repeat`` so that all repeats fit in ``budget_s`` — a fast
   kernel gets many repeats (up to ``max_repeats``), a slow one ``min_repeats``;
3. the result is the list of per-call means of each repeat, summarised by its median, its
   interquartile range (IQR), min and max;
4. when the spread (IQR / median) exceeds ``max_spread`` (10 % by default) the whole
   measurement is made once more and the one of the two with the smaller spread is kept,
   with ``remeasured=True``: a load spike that hit one measurement rarely hits both.

A median with its IQR is robust to a few preempted repeats (a mean is not), and the IQR is
the noise figure the summaries print. Method: the usual practice of benchmark harnesses
(Google Benchmark's repetitions with median/stddev aggregates; pyperf's warm-up and
calibrated loops), written here in our own terms.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: Spread (IQR / median) above which a measurement is made once more.
MAX_SPREAD = 0.10

#: The clocks a timing may use (option ``clock``): elapsed time, or the process's CPU time.
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def clock_of(opt: dict):
    """The clock function named by ``opt["clock"]`` (default ``"wall"``).

    Raises
    ------
    ValueError
        For another name.
    """
    name = opt.get("clock") or "wall"
    if name not in CLOCKS:
        raise ValueError(f"timing: unknown clock {name!r}; expected one of {sorted(CLOCKS)}")
    return CLOCKS[name]


def quantile(xs, q: float) -> float:
    """The ``q`` quantile (0..1) of ``xs`` by linear interpolation between order statistics
    (numpy's default method)."""
    s = sorted(xs)
    if not s:
        return math.nan
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass(frozen=True)
class Timing:
    """A measured time: ``costs`` are seconds per call, one mean per repeat.

    Attributes
    ----------
    costs : tuple of float
        Seconds per call of each repeat (the kept measurement).
    number : int
        Calls per repeat.
    first_s : float
        Seconds of the first (warm-up) call.
    remeasured : bool
        The first measurement's spread exceeded the threshold and it was made again.
    """

    costs: tuple
    number: int = 1
    first_s: float = 0.0
    remeasured: bool = False
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def median(self) -> float:
        """Median seconds per call (``inf`` without costs)."""
        return statistics.median(self.costs) if self.costs else math.inf

    @property
    def iqr(self) -> float:
        """Interquartile range of ``costs`` (seconds)."""
        return quantile(self.costs, 0.75) - quantile(self.costs, 0.25) if self.costs else 0.0

    @property
    def spread(self) -> float:
        """IQR over median: 0.05 means the middle half of the repeats lie within 5 %."""
        m = self.median
        return self.iqr / m if self.costs and m > 0 else 0.0

    @property
    def min(self) -> float:
        return min(self.costs) if self.costs else math.inf

    @property
    def max(self) -> float:
        return max(self.costs) if self.costs else math.inf

    def to_json(self) -> dict:
        """A JSON-able dict (seconds); :meth:`from_json` reads it back."""
        return {"costs": [float(c) for c in self.costs], "number": self.number,
                "first_s": float(self.first_s), "remeasured": self.remeasured,
                "median": self.median, "iqr": self.iqr, "spread": round(self.spread, 6),
                "min": self.min, "max": self.max}

    @staticmethod
    def from_json(d: dict) -> Timing:
        return Timing(tuple(d.get("costs") or ()), int(d.get("number", 1)),
                      float(d.get("first_s", 0.0)), bool(d.get("remeasured", False)))

    @staticmethod
    def pooled(timings) -> Timing:
        """All repeats of several measurements of the same thing as one Timing."""
        timings = list(timings)
        return Timing(tuple(c for t in timings for c in t.costs),
                      max((t.number for t in timings), default=1),
                      timings[0].first_s if timings else 0.0,
                      any(t.remeasured for t in timings))


def plan(first_s: float, *, min_repeat_ms: float = 20.0, min_repeats: int = 5,
         max_repeats: int = 40, budget_s: float = 0.3, number: int = 1) -> tuple[int, int]:
    """``(number, repeat)`` for a kernel whose first call took ``first_s`` seconds.

    ``number`` (at least the given one) makes one repeat last at least ``min_repeat_ms``
    milliseconds; ``repeat`` fills ``budget_s`` seconds, within ``[min_repeats,
    max_repeats]``.
    """
    first_s = max(first_s, 1e-7)
    number = max(1, int(number), math.ceil(min_repeat_ms * 1e-3 / first_s - 1e-9))
    per_repeat = number * first_s
    repeat = int(budget_s / per_repeat)
    return number, max(min_repeats, min(max_repeats, repeat))


def time_calls(run: Callable[[int], float], *, min_repeat_ms: float = 20.0,
               min_repeats: int = 5, max_repeats: int = 40, budget_s: float = 0.3,
               max_spread: float = MAX_SPREAD, remeasure: bool = True,
               first_s: float | None = None, number: int = 1) -> Timing:
    """Time a kernel; see the module docstring.

    Parameters
    ----------
    run : callable
        ``run(n)`` makes ``n`` consecutive calls and returns their total seconds.
    number : int
        The least number of calls per repeat.
    first_s : float, optional
        Seconds of a first call already made by the caller (then ``run(1)`` is not made
        as a warm-up).

    Raises
    ------
    ValueError
        For a non-positive ``min_repeats`` or ``max_repeats < min_repeats``.
    """
    if min_repeats < 1 or max_repeats < min_repeats:
        raise ValueError(f"time_calls: min_repeats={min_repeats}, max_repeats={max_repeats}; "
                         "expected 1 <= min_repeats <= max_repeats")
    if first_s is None:
        first_s = run(1)
    number, repeat = plan(first_s, min_repeat_ms=min_repeat_ms, min_repeats=min_repeats,
                          max_repeats=max_repeats, budget_s=budget_s, number=number)

    def once() -> Timing:
        return Timing(tuple(run(number) / number for _ in range(repeat)), number, first_s)

    t = once()
    if remeasure and t.spread > max_spread:
        again = once()
        best = again if again.spread <= t.spread else t
        t = Timing(best.costs, number, first_s, remeasured=True)
    return t


#: keys of a measurement-options dict that :func:`timing_kwargs` passes on
_KEYS = ("number", "min_repeat_ms", "min_repeats", "max_repeats", "budget_s", "max_spread",
         "remeasure")


def timing_kwargs(opt: dict) -> dict:
    """The keywords of :func:`time_calls` found in ``opt`` (a run-options dict sent to a
    worker or an anchor process)."""
    return {k: opt[k] for k in _KEYS if k in opt}


def time_function(fn: Callable[[], object], clock: Callable[[], float] = time.perf_counter,
                  **kw) -> Timing:
    """:func:`time_calls` of ``fn()`` (warm-up included) on ``clock`` (a function giving
    seconds, :data:`CLOCKS`); keywords as there."""

    def run(n: int) -> float:
        t0 = clock()
        for _ in range(n):
            fn()
        return clock() - t0

    return time_calls(run, **kw)
