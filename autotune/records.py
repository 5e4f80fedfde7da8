"""Tuning records: JSON Lines, one trial a line, flushed as written. Never pickle.

A line is one JSON object::

    {"schema": 1, "polytile": "0.1.0",
     "workload": {"template": "matmul", "args": [1024, 1024, 1024], "dtype": "float32"},
     "target": "llvm -mcpu=znver5",
     "config": {"tile_i": [-1, 8, 8], ...}, "config_index": 1234,
     "trace": [["split", "C", [["iv", 0, "i"]], [["factor", 64]]], ...],
     "costs": [0.0181, 0.0179, 0.0180], "error": null, "error_msg": "",
     "timestamp": 1795000000.0, "wall_s": 0.41, "build_s": 0.12, "tuner": "model",
     "threads": 2, "spread": 0.031, "remeasured": false, "phase": "search"}

``costs`` are seconds per run (one per repeat, :func:`.timing.time_calls`); ``error`` is null
or one of :data:`ERROR_CODES`; ``threads`` the OpenMP threads the candidate ran with;
``spread`` the IQR of ``costs`` over their median; ``device`` (GPU targets only) the GPU
it was measured on: ``{"name", "arch", "compute_capability", "driver", "cuda"}``
(:mod:`.device`); ``remeasured`` whether the first
measurement's spread passed the threshold and it was made again. ``phase`` is ``"search"``
for a trial; the last line of a run of ``polytile tune`` is a ``"summary"`` record: the
best config, its ``costs`` from the final comparison with the anchors, and ``summary``
(:meth:`.anchors.Comparison.to_json` plus the noise of the run's trials). Readers skip
summaries unless asked (:func:`read_records`). Lines of older files, without these fields,
read as trials with ``threads`` 0 (unknown) and ``spread`` computed from ``costs``.
A reader skips a torn or corrupt line with a :class:`RecordWarning`
naming the file and line number, and refuses a newer schema with a :class:`TuneError`.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field

from polytile import __version__
from polytile.errors import TuneError, format_error

#: Version of the line format written by this module; readers accept this and older ones.
SCHEMA_VERSION = 1
#: Typed failure codes of a trial.
ERROR_CODES = ("build_error", "runtime_error", "timeout", "wrong_result", "invalid_config")


class RecordWarning(UserWarning):
    """A record line was skipped (torn, corrupt or incomplete)."""


@dataclass
class Record:
    """One trial. ``cost`` is the median of ``costs`` (seconds), ``inf`` on failure."""

    workload: dict
    target: str
    config: dict
    costs: list = field(default_factory=list)
    error: str | None = None
    error_msg: str = ""
    config_index: int | None = None
    trace: list | None = None
    timestamp: float = 0.0
    wall_s: float = 0.0
    build_s: float = 0.0
    tuner: str = ""
    polytile: str = __version__
    schema: int = SCHEMA_VERSION
    threads: int = 0
    spread: float | None = None
    remeasured: bool = False
    phase: str = "search"
    summary: dict | None = None
    device: dict | None = None
    line: int = 0  # line number in the file it was read from (not written)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs)

    @property
    def cost(self) -> float:
        return statistics.median(self.costs) if self.ok else math.inf

    def workload_str(self) -> str:
        w = self.workload
        return f"{w['template']}({', '.join(map(str, w['args']))}) {w.get('dtype', '')}".strip()

    def to_json(self) -> str:
        d = {"schema": self.schema, "polytile": self.polytile, "workload": self.workload,
             "target": self.target, "config": self.config, "config_index": self.config_index,
             "trace": self.trace, "costs": [float(c) for c in self.costs],
             "error": self.error, "error_msg": self.error_msg,
             "timestamp": self.timestamp or time.time(), "wall_s": round(self.wall_s, 6),
             "build_s": round(self.build_s, 6), "tuner": self.tuner,
             "threads": self.threads, "spread": round(self.spread_value, 6),
             "remeasured": self.remeasured, "phase": self.phase}
        if self.summary is not None:
            d["summary"] = self.summary
        if self.device is not None:
            d["device"] = self.device
        return json.dumps(d, separators=(",", ":"))

    @property
    def spread_value(self) -> float:
        """``spread`` as written, or computed from ``costs`` (IQR / median) for a record of
        an older file."""
        if self.spread is not None:
            return float(self.spread)
        from .timing import Timing

        return Timing(tuple(self.costs)).spread if self.costs else 0.0

    @staticmethod
    def from_dict(d: dict, line: int = 0) -> Record:
        w = d["workload"]
        if not (isinstance(w, dict) and isinstance(w.get("template"), str)
                and isinstance(w.get("args"), list)):
            raise ValueError("malformed workload")
        if not isinstance(d["target"], str) or not isinstance(d["config"], dict):
            raise ValueError("malformed target or config")
        costs = d.get("costs") or []
        if not isinstance(costs, list) or not all(
                isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c)
                and c > 0 for c in costs):
            raise ValueError("malformed costs (expected positive seconds)")
        err = d.get("error")
        if err is not None and err not in ERROR_CODES:
            raise ValueError(f"unknown error code {err!r}")
        schema = d.get("schema", 1)
        if isinstance(schema, bool) or not isinstance(schema, int) or schema < 1:
            raise ValueError(f"unknown schema version {schema!r}")
        return Record(workload=w, target=d["target"], config=d["config"], costs=list(costs),
                      error=err, error_msg=d.get("error_msg", "") or "",
                      config_index=d.get("config_index"), trace=d.get("trace"),
                      timestamp=float(d.get("timestamp", 0.0)),
                      wall_s=float(d.get("wall_s", 0.0)), build_s=float(d.get("build_s", 0.0)),
                      tuner=d.get("tuner", ""), polytile=d.get("polytile", ""),
                      schema=schema, threads=int(d.get("threads") or 0),
                      spread=_opt_float(d.get("spread")),
                      remeasured=bool(d.get("remeasured", False)),
                      phase=str(d.get("phase") or "search"),
                      summary=d.get("summary") if isinstance(d.get("summary"), dict)
                      else None, device=_device(d.get("device")), line=line)


def _device(v) -> dict | None:
    if v is None:
        return None
    if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
        raise ValueError("malformed device (expected an object of strings)")
    return dict(v)


def _opt_float(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _foreign_line(text: str) -> str | None:
    """Why a non-empty line cannot come from a records file, or None when it can: a JSON
    object with a ``schema`` or ``workload`` key, or a torn line of one (the writer puts
    ``schema`` first)."""
    try:
        d = json.loads(text)
    except ValueError:
        return None if text.startswith('{"schema"') else "it is not JSON"
    if not isinstance(d, dict):
        return f"it is a JSON {type(d).__name__}, not an object"
    if "schema" in d or "workload" in d:
        return None
    keys = ", ".join(sorted(map(str, d))[:6])
    return f"a JSON object with the keys [{keys}] but no 'schema' or 'workload'"


def _check_records_file(path: str, lines, primitive: str, writing: bool = False) -> None:
    """Raise unless some non-empty line of ``lines`` (numbered from 1) could be a record,
    or there is none: a file of another format is refused as a whole (a TVM log, a CSV,
    a binary file), where a records file with a few bad lines is read around them."""
    first = None
    for n, text in enumerate(lines, start=1):
        text = text.strip()
        if not text:
            continue
        why = _foreign_line(text)
        if why is None:
            return
        first = first or (n, why)
    if first is not None:
        n, why = first
        what = f"{path!r} is not a polytile records file (line {n}: {why})"
        raise TuneError(format_error(
            primitive, what + ("; nothing was appended to it" if writing else ""),
            "expected the JSON Lines file of `polytile tune`", File=f"{path}:{n}",
            hint="logs of TVM/AutoTVM cannot be read; pass a records file of polytile, or a "
            "new path for a new one"))


def check_log_path(path: str | os.PathLike, primitive: str = "records") -> None:
    """Check, without writing anything, that records can be appended to ``path``: it is not
    a directory, its folder exists or can be created, and an existing file is a records
    file (so a mistyped ``--log`` never adds lines to a file of another kind).

    Raises
    ------
    TuneError
        Naming the path and what is wrong with it.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise TuneError(format_error(primitive, f"log {path!r} is a directory",
                                     "expected a records file path",
                                     hint=f"pass {os.path.join(path, 'polytile_tune.jsonl')!r}"))
    parent = os.path.dirname(os.path.abspath(path))
    up = parent
    while not os.path.exists(up):
        up = os.path.dirname(up)
    if not os.path.isdir(up):
        raise TuneError(format_error(primitive, f"cannot write log {path!r}: {up!r} is a file, "
                                     "not a directory", "expected a path in a directory"))
    if not os.access(up, os.W_OK | os.X_OK) or (
            os.path.exists(path) and not os.access(path, os.W_OK)):
        raise TuneError(format_error(primitive, f"cannot write log {path!r}: permission "
                                     "denied", "expected a writable path",
                                     hint="pass --log in a folder of yours"))
    if os.path.isfile(path) and os.path.getsize(path) > 0:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = [line for _, line in zip(range(200), f)]
        _check_records_file(path, head, primitive, writing=True)


def read_records(path: str | os.PathLike, *, missing_ok: bool = False,
                 summaries: bool = False) -> list[Record]:
    """All valid records of a JSON Lines file, in file order; the ``"summary"`` records
    of tuning runs only with ``summaries=True``.

    Torn, corrupt and incomplete lines are skipped with a :class:`RecordWarning` naming the
    file and line.

    Raises
    ------
    TuneError
        If the file does not exist (unless ``missing_ok``), is a directory, is not a
        records file at all (no line is a record: a TVM log, a binary file), or holds a
        record of a newer schema than this polytile reads.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        if missing_ok:
            return []
        raise TuneError(format_error("records", f"file {path!r} not found",
                                     "expected a records file written by `polytile tune`"))
    if os.path.isdir(path):
        raise TuneError(format_error("records", f"{path!r} is a directory",
                                     "expected a records file written by `polytile tune`"))
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    _check_records_file(path, lines, "records")
    out = []
    for n, text in enumerate(lines, start=1):
        text = text.strip()
        if not text:
            continue
        try:
            d = json.loads(text)
            if not isinstance(d, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            warnings.warn(f"records: {path}:{n}: skipped a torn or corrupt line "
                          f"({str(exc)[:60]})", RecordWarning, stacklevel=2)
            continue
        schema = d.get("schema")
        if isinstance(schema, int) and schema > SCHEMA_VERSION:
            raise TuneError(format_error(
                "records", f"{path}:{n} has schema version {schema}",
                f"this polytile ({__version__}) reads versions up to {SCHEMA_VERSION}",
                hint="upgrade polytile to read it, or write a new log"))
        try:
            rec = Record.from_dict(d, line=n)
            if rec.phase != "summary" or summaries:
                out.append(rec)
        except (KeyError, ValueError, TypeError) as exc:
            warnings.warn(f"records: {path}:{n}: skipped an incomplete record ({exc})",
                          RecordWarning, stacklevel=2)
    return out


class RecordWriter:
    """Appends records to a JSON Lines file, one flushed line per record.

    A file whose last line was torn (no final newline) gets a newline first so that the
    next record starts on a line of its own. An existing file is only ever appended to,
    and only when it is a records file (see :func:`check_log_path`, which raises
    :class:`TuneError` otherwise).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        check_log_path(self.path)
        d = os.path.dirname(self.path)
        if d:
            os.makedirs(d, exist_ok=True)
        needs_nl = False
        if os.path.exists(self.path) and os.path.getsize(self.path) > 0:
            with open(self.path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                needs_nl = f.read(1) != b"\n"
        self._f = open(self.path, "a", encoding="utf-8")
        if needs_nl:
            self._f.write("\n")
            self._f.flush()

    def write(self, rec: Record) -> None:
        self._f.write(rec.to_json() + "\n")
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def workload_matches(rec: Record, workload_key: dict) -> bool:
    w = rec.workload
    return (w.get("template") == workload_key["template"]
            and list(w.get("args", [])) == list(workload_key["args"])
            and w.get("dtype", "float32") == workload_key.get("dtype", "float32"))


def target_matches(rec_target: str, target: str) -> bool:
    """Same target kind and options (``-mcpu`` included; option order ignored). A GPU
    target without ``-arch`` matches records of any ``-arch`` (the device class then
    decides, :mod:`.device`)."""
    a, b = rec_target.split(), target.split()
    if not (a and b and a[0] == b[0]):
        return False
    oa, ob = sorted(a[1:]), sorted(b[1:])
    if not any(w.startswith("-arch=") for w in oa) or not any(
            w.startswith("-arch=") for w in ob):
        oa = [w for w in oa if not w.startswith("-arch=")]
        ob = [w for w in ob if not w.startswith("-arch=")]
    return oa == ob


def best_records(records: Iterable[Record]) -> dict:
    """The best successful record per (workload JSON, target, device class): the last
    ``"summary"`` record of a tuning run (its config the one the run's final re-measure
    picked, :func:`.tune.finalists`) where no trial of that key follows it in
    ``records``, else the fastest trial."""
    from .device import device_class

    best: dict = {}
    summary: dict = {}
    for r in records:
        if not r.ok:
            continue
        key = (json.dumps(r.workload, sort_keys=True), r.target, device_class(r.device))
        if r.phase == "summary":
            summary[key] = r
            continue
        summary.pop(key, None)   # trials after the run's summary: it no longer says
        if key not in best or r.cost < best[key].cost:
            best[key] = r
    best.update(summary)
    return best
