"""AutoTVM's ``autotvm.record`` on polytile's records files: ``load_from_file`` and
``pick_best``. AutoTVM's own log lines are not read (a file that is no polytile records
file raises ``TuneError``)."""

from __future__ import annotations

import os

from polytile.autotune.records import RecordWriter, best_records, read_records
from polytile.autotune.template import Workload

from .measure import MeasureInput, result_of


class RecordFile:
    """The ``(MeasureInput, MeasureResult)`` pairs of a records file, iterable (each
    input's ``task`` is the record's :class:`polytile.autotune.Workload`, its ``config``
    the knob dict); ``filename`` is kept so that ``XGBTuner.load_history`` can learn from
    the file. Made by :func:`load_from_file`."""

    def __init__(self, filename):
        self.filename = os.fspath(filename)
        self.records = read_records(self.filename)

    def __iter__(self):
        for rec in self.records:
            yield (MeasureInput(rec.target, Workload.from_key(rec.workload), rec.config),
                   result_of(rec))

    def __len__(self) -> int:
        return len(self.records)


def load_from_file(filename) -> RecordFile:
    """TVM's ``autotvm.record.load_from_file``: the pairs of the polytile records file
    ``filename``.

    Raises
    ------
    TuneError
        For a missing file or one that is no records file.
    """
    return RecordFile(filename)


def pick_best(in_file, out_file) -> int:
    """TVM's ``autotvm.record.pick_best(in_file, out_file)``: write the best record of each
    workload and target of ``in_file`` to ``out_file`` (appended); returns how many.

    Raises
    ------
    TuneError
        For an ``in_file`` that is no records file.
    """
    best = best_records(read_records(os.fspath(in_file)))
    w = RecordWriter(out_file)
    try:
        for rec in best.values():
            w.write(rec)
    finally:
        w.close()
    return len(best)
