"""A stand-in for ``polytile.autotune.gpu_runner`` on machines without a GPU (tests).

``python fake_gpu_runner.py STATE PLAN FD``: speaks the runner's protocol on connection
``FD``. ``PLAN`` is a comma-separated list of what the n-th ``run`` message (counted across
restarts in the file ``STATE``) does: ``ok`` (answers a cost derived from the cubin's size),
``die`` (the process kills itself with SIGSEGV, as a crashing driver would), ``hang``
(never answers), ``fault`` (answers a CUDA_ERROR_ILLEGAL_ADDRESS with ``fatal`` and exits,
as the real runner does), ``wrong`` (a wrong_result); past the plan's end, ``ok``. The
first line of ``STATE`` counts the runs, the second the starts.
"""

import os
import signal
import sys
import time
from multiprocessing.connection import Connection


def _bump(path: str, line: int) -> int:
    vals = [0, 0]
    if os.path.exists(path):
        with open(path) as fh:
            vals = [int(x) for x in fh.read().split()] + [0, 0]
    vals[line] += 1
    with open(path, "w") as fh:
        fh.write(f"{vals[0]}\n{vals[1]}\n")
    return vals[line] - 1


def main(state: str, plan: str, fd: str) -> None:
    conn = Connection(int(fd))
    conn.recv()
    _bump(state, 1)
    conn.send(("ready", {"name": "Fake GPU", "arch": "sm_90", "compute_capability": "9.0",
                         "driver": "999.1", "cuda": "13.0", "max_threads_per_block": 1024,
                         "max_shared_memory_per_block": 49152,
                         "max_registers_per_block": 65536, "l2_cache_bytes": 50 << 20,
                         "multi_processor_count": 132}))
    steps = [s for s in plan.split(",") if s]
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "exit":
            return
        _, cid, image, meta, opt = msg
        n = _bump(state, 0)
        what = steps[n] if n < len(steps) else "ok"
        assert isinstance(image, bytes) and meta["format"] == "polytile-function"
        if what == "die":
            os.kill(os.getpid(), signal.SIGSEGV)
        if what == "hang":
            time.sleep(3600)
        if what == "fault":
            conn.send(("ran", cid, "runtime_error", "cuda: running kernel 'main_kernel0' "
                       "failed with CUDA_ERROR_ILLEGAL_ADDRESS", [], None, True))
            os._exit(3)
        if what == "wrong":
            conn.send(("ran", cid, "wrong_result", "output 'B' differs", [], None, False))
            continue
        cost = 1e-4 * (1 + len(image) % 97)
        conn.send(("ran", cid, None, "", [cost] * 3, {"costs": [cost] * 3, "number": 1,
                                                     "first_s": cost}, False))


if __name__ == "__main__":
    main(*sys.argv[1:4])
