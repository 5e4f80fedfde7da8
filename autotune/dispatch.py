"""Dispatch: which config a template uses when a user calls it.

``with autotune.apply_history_best("matmul.jsonl"):`` makes every template call inside
the block (``s, args = matmul(1024, 1024, 1024)``, then ``polytile.build(s, args)``) use
the fastest recorded config of its workload for the context's target. Without a record
the template's default config is used, with a :class:`~.template.FallbackWarning`.
"""

from __future__ import annotations

import os
import warnings

from polytile.errors import TuneError, format_error

from .context import canonical_target, contexts, current_context, default_target
from .records import Record, best_records, read_records, target_matches, workload_matches
from .template import Workload, get_template

def _as_records(log) -> list[Record]:
    if isinstance(log, (str, os.PathLike)):
        return read_records(log)
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
    target : str
        The target the code will be built for (default ``"llvm"``, the host CPU).
    """

    def __init__(self, log, target: str = "llvm"):
        self.target = canonical_target(target)
        self.records = _as_records(log)
        self.best = best_records(self.records)

    def best_record(self, workload: Workload, target: str) -> Record | None:
        key = workload.key()
        cands = [r for r in self.best.values()
                 if workload_matches(r, key) and target_matches(r.target, target)]
        return min(cands, key=lambda r: r.cost) if cands else None

    def query(self, workload: Workload, target: str, space):
        """The best recorded config of ``workload`` on ``target`` as a ConfigEntity of
        ``space``, or None."""
        rec = self.best_record(workload, target)
        if rec is None:
            return None
        try:
            return space.from_json(rec.config)
        except TuneError as exc:
            warnings.warn(f"apply_history_best: the best record of {workload} (line "
                          f"{rec.line}) does not fit the template's space: {exc}",
                          stacklevel=3)
            return None

    def __enter__(self):
        contexts().append(self)
        return self

    def __exit__(self, *exc):
        contexts().remove(self)


def apply_history_best(log, target: str = "llvm") -> ApplyHistoryBest:
    """Context manager: inside it, calling a template builds its best recorded config for
    ``target``; see :class:`ApplyHistoryBest`."""
    return ApplyHistoryBest(log, target)


def load_best(log, workload, target: str = "llvm") -> Record | None:
    """The fastest successful record of ``workload`` on ``target`` in ``log``, or None.

    ``workload`` is a :class:`Workload`, its key dict, or a template name (its default
    arguments, float32).
    """
    if isinstance(workload, str):
        workload = get_template(workload).workload()
    if isinstance(workload, dict):
        workload = Workload.from_key(workload)
    return ApplyHistoryBest(log, target).best_record(workload, canonical_target(target))


__all__ = ["ApplyHistoryBest", "apply_history_best", "canonical_target", "current_context",
           "default_target", "load_best"]
