"""Dispatch: which config a template uses when a user calls it.

``with autotune.apply_history_best("matmul.jsonl"):`` makes every template call inside
the block (``s, args = matmul(1024, 1024, 1024)``, then ``polytile.build(s, args)``) use
the best recorded config of its workload for the context's target: the one the final
re-measure of the last tuning run picked (its ``"summary"`` record), else the fastest
trial (:func:`.records.best_records`). Without a record
the template's default config is used, with a :class:`~.template.FallbackWarning`. On GPU
targets records are selected by device class (:mod:`.device`): a record tuned on another
GPU model or compute capability is refused with a ``TuneError`` naming both.

Symbolic sizes (:mod:`.sizes`): a template tuned over ``n`` for some values
(``"n=64"``, ``"n=256"``) and called for a value that was not tuned (``"n=200"``) uses the
record of the *nearest* tuned value. The rule (:func:`nearest_records`): among the
records of the same template, dtype, target (and device class) whose other arguments are
equal and whose symbolic sizes have the same names, the distance is
``sum |log2(v_record / v_called)|`` over the sizes (a ratio: 128 is as near to 256 as 512
is); the smallest distance wins, ties go to the larger tuned value (its tiles fit the
called size no worse), then to the faster record; the first one whose config fits the
template's space at the called value is used. A value of 0 counts as 1. The choice is
logged (logger ``polytile.autotune``) and kept in :attr:`ApplyHistoryBest.chosen`.
"""

from __future__ import annotations

import logging
import math
import os
import warnings

from polytile.errors import TuneError, format_error

from .context import canonical_target, contexts, current_context, default_target
from . import sizes as size_args
from .device import current_class, device_class, same_class
from .records import Record, best_records, read_records, target_matches, workload_matches
from .template import Workload, get_template

_log = logging.getLogger("polytile.autotune")

def _as_records(log) -> list[Record]:
    if isinstance(log, (str, os.PathLike)):
        # with the runs' summaries: their final re-measure picked the best config
        return read_records(log, summaries=True)
    recs = list(log)
    if not all(isinstance(r, Record) for r in recs):
        raise TuneError(format_error("apply_history_best", "got records of the wrong type",
                                     "expected a records file path or a list of Record"))
    return recs


class ApplyHistoryBest:
    """A context in which templates use the best records of ``log`` for ``target``.

    Parameters
    ----------
    log : str or path or list of Record
        A JSON Lines records file (see :mod:`.records`) or records already read.
    target : str, optional
        The target the code will be built for. Default: the target of the ``with
        polytile.target.Target(...):`` block the template is called in (AutoTVM's
        nesting), else ``"llvm"``, the host CPU.
    """

    def __init__(self, log, target: str | None = None, device: dict | None = None):
        self._target = canonical_target(str(target)) if target is not None else None
        self.records = _as_records(log)
        self.best = best_records(self.records)
        self._device = device
        #: ``{str(workload): record}`` of every call answered by a record of another
        #: symbolic size value (the nearest rule of the module docstring).
        self.chosen: dict = {}

    @property
    def target(self) -> str:
        """The canonical target templates are instantiated for in this context."""
        return self._target if self._target is not None else default_target()

    def device_for(self, target: str) -> dict | None:
        """The device class records are selected by on ``target`` (:mod:`.device`)."""
        if self._device is not None:
            return self._device
        return current_class(target)

    def best_record(self, workload: Workload, target: str) -> Record | None:
        """The best record of ``workload`` on ``target`` measured on this device class.

        Raises
        ------
        TuneError
            When the only records of the workload on that target kind come from another
            GPU class (the message names both classes).
        """
        key = workload.key()
        cands = [r for r in self.best.values()
                 if workload_matches(r, key) and target_matches(r.target, target)]
        want = self.device_for(target) if cands else None
        mine = [r for r in cands if same_class(r.device, want)]
        if cands and not mine:
            others = sorted({device_class(r.device) for r in cands})
            raise TuneError(format_error(
                "apply_history_best", f"the records of {workload} on '{target}' were "
                f"measured on {', '.join(others)}, not on this device class "
                f"({device_class(want)})", "expected records tuned on the same GPU model and "
                "compute capability (tiles tuned for one GPU mislead on another)",
                hint=f"tune on this GPU: polytile tune {workload.template} --target "
                f"{_quoted(target)} --args {','.join(map(str, workload.args))}"
                + (f" --dtype {workload.dtype}" if workload.dtype != "float32" else "")))
        return min(mine, key=lambda r: r.cost) if mine else None

    def query(self, workload: Workload, target: str, space):
        """The best recorded config of ``workload`` on ``target`` as a ConfigEntity of
        ``space``, or None. Without a record of ``workload`` itself, a workload with
        symbolic sizes takes the record of the nearest tuned values (module docstring)."""
        rec = self.best_record(workload, target)
        if rec is None:
            return self._query_nearest(workload, target, space)
        try:
            return space.from_json(rec.config)
        except TuneError as exc:
            warnings.warn(f"apply_history_best: the best record of {workload} (line "
                          f"{rec.line}) does not fit the template's space: {exc}",
                          stacklevel=3)
            return None

    def _query_nearest(self, workload: Workload, target: str, space):
        want = self.device_for(target)
        for rec in nearest_records(self.best.values(), workload, target):
            if not same_class(rec.device, want):
                continue
            try:
                cfg = space.from_json(rec.config)
            except TuneError:
                continue   # tiles of that value that the called value's space lacks
            self.chosen[str(workload)] = rec
            _log.info("apply_history_best: %s was not tuned; using the record of %s "
                      "(line %s), the nearest tuned size", workload, rec.workload_str(),
                      rec.line)
            return cfg
        return None

    def __enter__(self):
        contexts().append(self)
        return self

    def __exit__(self, *exc):
        contexts().remove(self)


def _size_distance(rec_args, args) -> float | None:
    """``sum |log2(v_rec / v)|`` over the symbolic sizes when ``rec_args`` differs from
    ``args`` only in their values, else None."""
    if len(rec_args) != len(args):
        return None
    dist = 0.0
    for a, b in zip(rec_args, args):
        pa = size_args.parse(a) if isinstance(a, str) else None
        pb = size_args.parse(b) if isinstance(b, str) else None
        if pa is None or pb is None:
            if a != b or (pa is None) != (pb is None):
                return None
            continue
        if pa[0] != pb[0]:
            return None
        dist += abs(math.log2(max(pa[1], 1) / max(pb[1], 1)))
    return dist


def nearest_records(records, workload: Workload, target: str) -> list[Record]:
    """Records of ``workload``'s template, dtype and target at other values of its
    symbolic sizes, nearest first (the rule of the module docstring); ``[]`` when the
    workload has no symbolic size."""
    if not size_args.sizes_of(workload.args):
        return []
    ranked = []
    for r in records:
        w = r.workload
        if (not r.ok or w.get("template") != workload.template
                or w.get("dtype", "float32") != workload.dtype
                or not target_matches(r.target, target)):
            continue
        d = _size_distance(tuple(w.get("args", ())), tuple(workload.args))
        if d is None:
            continue
        larger = sum(size_args.sizes_of(w.get("args", ())).values())
        ranked.append((d, -larger, r.cost, r))
    ranked.sort(key=lambda t: t[:3])
    return [t[3] for t in ranked]


def apply_history_best(log, target: str | None = None, device: dict | None = None
                       ) -> ApplyHistoryBest:
    """Context manager: inside it, calling a template builds its best recorded config for
    ``target`` (default: the current ``with Target(...)`` one, else the host CPU); see
    :class:`ApplyHistoryBest`. On GPU targets only records of this
    device class count (``device``: a :mod:`.device` dict to pick another class, e.g.
    ``{"arch": "sm_90"}``), and records of other classes alone raise ``TuneError``."""
    return ApplyHistoryBest(log, target, device)


def load_best(log, workload, target: str = "llvm", device: dict | None = None
              ) -> Record | None:
    """The best successful record (:func:`.records.best_records`) of ``workload`` on
    ``target`` in ``log`` (on GPU
    targets: of this device class, see :func:`apply_history_best`), or None.

    ``workload`` is a :class:`Workload`, its key dict, or a template name (its default
    arguments, float32).
    """
    if isinstance(workload, str):
        workload = get_template(workload).workload()
    if isinstance(workload, dict):
        workload = Workload.from_key(workload)
    return ApplyHistoryBest(log, target, device).best_record(workload,
                                                             canonical_target(target))


__all__ = ["ApplyHistoryBest", "apply_history_best", "canonical_target", "current_context",
           "default_target", "load_best", "nearest_records"]


def _quoted(target: str) -> str:
    """``target`` as one shell word (``"cuda -arch=sm_90a"`` quoted)."""
    return f'"{target}"' if " " in target else target
