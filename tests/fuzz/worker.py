"""Worker processes: each case runs in a long-lived subprocess, restarted after a crash
(killed by a signal), a timeout, or every ``RECYCLE`` cases.

Protocol: one JSON line per request on the worker's stdin (``{"case": ...}``), one JSON line
per answer on a private copy of its stdout (the worker's own stdout and stderr go to a log
file, so output from compiled code or the compilers cannot corrupt the protocol). The parent
waits with ``select`` up to the timeout, then kills the worker's whole process group (nvcc,
g++ included) and reports ``hang``.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: cases a worker runs before it is replaced (JIT-compiled code is never freed)
RECYCLE = 150
_PKG = __package__ or "fuzz"
_ROOT = Path(__file__).resolve().parents[len(_PKG.split("."))]


def serve(target: str, workdir: str) -> None:
    """The worker's main loop (runs in the subprocess); ``workdir`` holds its compiled
    files (the parent removes it)."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import importlib

    runner = importlib.import_module(f"{_PKG}.runner")
    import polytile

    polytile.set_num_threads(2)
    rt = runner.Runtime(target, workdir)
    for line in sys.stdin:
        req = json.loads(line)
        print(f"--- case {req.get('id')}", file=sys.stderr, flush=True)
        out = runner.run_case(req["case"], rt)
        proto.write(json.dumps(out) + "\n")
        proto.flush()


class Worker:
    """One worker subprocess for ``target``; :meth:`run` gives the outcome of a case."""

    def __init__(self, target: str = "llvm"):
        self.target = target
        self.proc: subprocess.Popen | None = None
        self.done = 0
        self.tmp = tempfile.mkdtemp(prefix="polytile-fuzz-")
        self.log = open(os.path.join(self.tmp, "worker.log"), "wb")
        self.count = 0

    def _start(self) -> None:
        code = (f"import sys; sys.path.insert(0, {str(_ROOT)!r}); "
                f"from {_PKG}.worker import serve; serve({self.target!r}, {self.tmp!r})")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.log, start_new_session=True, cwd=str(_ROOT))
        self.done = 0

    def stop(self) -> None:
        """End the worker (and its process group)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        self.proc = None

    def close(self) -> None:
        self.stop()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _log_tail(self, start: int) -> str:
        with open(self.log.name, "rb") as fh:
            fh.seek(start)
            return fh.read()[-3000:].decode(errors="replace")

    def run(self, case: dict, timeout: float) -> dict:
        """The outcome dict of ``case`` (see :mod:`.runner`), ``hang`` after ``timeout``
        seconds, ``crash`` (phase ``process``) when the worker dies."""
        if self.proc is None or self.proc.poll() is not None or self.done >= RECYCLE:
            self.stop()
            self._start()
        self.count += 1
        start = os.path.getsize(self.log.name)
        t0 = time.perf_counter()
        try:
            self.proc.stdin.write((json.dumps({"id": self.count, "case": case}) + "\n")
                                  .encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        elapsed = round(time.perf_counter() - t0, 3)
        if ready and line:
            self.done += 1
            out = json.loads(line)
            out.setdefault("seconds", elapsed)
            return out
        if not ready:
            self.stop()
            return {"cls": "hang", "phase": "timeout", "error": "Timeout",
                    "message": f"no answer within {timeout:g} s", "seconds": elapsed,
                    "log": self._log_tail(start)}
        self.proc.wait()
        rc = self.proc.returncode
        self.stop()
        sig = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
        return {"cls": "crash", "phase": "process", "error": sig,
                "message": f"the worker process died ({sig})", "seconds": elapsed,
                "log": self._log_tail(start)}


def run_cases(cases, target: str, timeout: float, jobs: int = 1):
    """Yield ``(case, outcome)`` for each case (in completion order with ``jobs > 1``)."""
    if jobs <= 1:
        w = Worker(target)
        try:
            for case in cases:
                yield case, w.run(case, timeout)
        finally:
            w.close()
        return
    from concurrent.futures import ThreadPoolExecutor

    workers = [Worker(target) for _ in range(jobs)]
    free = list(workers)
    import threading

    lock = threading.Lock()

    def job(case):
        with lock:
            w = free.pop()
        try:
            return case, w.run(case, timeout)
        finally:
            with lock:
                free.append(w)

    try:
        with ThreadPoolExecutor(jobs) as ex:
            pending = set()
            it = iter(cases)
            for case in it:
                pending.add(ex.submit(job, case))
                if len(pending) >= jobs * 2:
                    from concurrent.futures import FIRST_COMPLETED, wait

                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for d in done:
                        yield d.result()
            for d in pending:
                yield d.result()
    finally:
        for w in workers:
            w.close()
