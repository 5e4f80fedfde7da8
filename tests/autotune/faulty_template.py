"""A test template whose configs fail in every way a candidate can (never imported by
pytest: its name does not start with ``test_``; loaded as ``faulty_template.py:faulty``).

Knob ``mode``: ``ok``; ``segv`` (the worker crashes while building); ``hang`` (building
never ends); ``oom`` (a runaway allocation while building); ``invalid`` (an illegal
schedule); ``wrong`` (a different result); ``crash_run`` / ``hang_run`` (the built kernel
crashes or hangs when run: the call of a module whose output is named so is patched).
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from polytile import te
from polytile.autotune import ConfigEntity, get_config
from polytile.targets.llvm.runtime import LLVMModule

MODES = ["ok", "segv", "hang", "oom", "invalid", "wrong", "crash_run", "hang_run"]

_orig_call = LLVMModule.__call__


def _patched_call(self, *args):
    names = {getattr(p, "name", "") for p in self.func.params}
    if "C_crash_run" in names:
        ctypes.string_at(0)  # segfault
    if "C_hang_run" in names:
        time.sleep(3600)
    return _orig_call(self, *args)


LLVMModule.__call__ = _patched_call


def faulty(n: int = 16, dtype: str = "float32"):
    cfg = get_config()
    cfg.define_knob("mode", MODES, default="ok")
    cfg.define_split("tile", n, num_outputs=2, policy="candidate", candidate=[[-1, 8]])
    mode = cfg["mode"].val
    if isinstance(cfg, ConfigEntity):  # fail when applied, not while the space is collected
        if mode == "segv":
            ctypes.string_at(0)
        elif mode == "hang":
            time.sleep(3600)
        elif mode == "oom":
            np.ones(1 << 40, dtype=np.uint8)  # 1 TiB
    A = te.placeholder((n,), name="A", dtype=dtype)
    scale = 3.0 if mode == "wrong" else 2.0
    name = f"C_{mode}" if mode.endswith("_run") else "C"
    C = te.compute((n,), lambda i: A[i] * scale, name=name)
    s = te.create_schedule(C.op)
    xo, xi = cfg["tile"].apply(s, C, C.op.axis[0])
    if mode == "invalid":
        s[C].vectorize(xo)  # a parallel loop inside a vectorized one: refused when lowered
        s[C].parallel(xi)
    else:
        s[C].vectorize(xi)
    return s, [A, C]
