"""The printed loop nest is the main debugging artifact: it must be identical across runs,
processes and hash seeds, and across rebuilding the same computation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import lowered
from operators import BUILDERS, SCHEDULES, SIZES

SCRIPT = r"""
import sys
sys.path[:0] = [{tests!r}, {sched!r}]
from helpers import lowered
from operators import BUILDERS, SCHEDULES, SIZES
for op in sorted(SCHEDULES):
    for fn in SCHEDULES[op]:
        w = BUILDERS[op](*SIZES[op]["small"])
        s = w.schedule()
        fn(w, s)
        print(op, fn.__name__)
        print(lowered(s, w.args))
"""


def _all_texts() -> str:
    out = []
    for op in sorted(SCHEDULES):
        for fn in SCHEDULES[op]:
            w = BUILDERS[op](*SIZES[op]["small"])
            s = w.schedule()
            fn(w, s)
            out.append(f"{op} {fn.__name__}\n{lowered(s, w.args)}")
    return "\n".join(out) + "\n"


def test_rebuilding_gives_the_same_text():
    assert _all_texts() == _all_texts()


def test_text_is_independent_of_the_hash_seed():
    here = Path(__file__).resolve().parent
    code = SCRIPT.format(tests=str(here.parent), sched=str(here))
    texts = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        texts.append(r.stdout)
    assert texts[0] == texts[1]
    assert texts[0] == _all_texts()
