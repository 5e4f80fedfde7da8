"""Cases from seeds: ``generate(seed, target)`` is a pure function of its arguments."""

from __future__ import annotations

import numpy as np

from .kinds import GENERATORS
from .programs import KINDS, Gen
from .schedules import generate_steps

#: mixed into every seed, so that changing the generators can start a fresh sequence
SEED_BASE = 20_261_201
DATA_MODES = ("uniform", "grid", "nan")


def generate(seed: int, target: str = "llvm") -> dict:
    """The case of ``seed`` for ``target`` (``llvm`` or ``cuda``): a program of kind
    ``KINDS[seed % 6]``, a random schedule and a data mode (see :mod:`.spec`)."""
    # one stream each for the program, the schedule and the data: the program and the data
    # of a seed do not depend on which steps the compiler accepts
    t = 0 if target == "llvm" else 1
    rng_prog, rng_sched, rng_data = (np.random.default_rng([SEED_BASE, seed, t, k])
                                     for k in range(3))
    kind = KINDS[seed % len(KINDS)]
    prog = GENERATORS[kind](Gen(rng_prog))
    try:
        steps = generate_steps(rng_sched, prog, target)
    except Exception:  # noqa: BLE001 - the program itself does not build: the runner says so
        steps = []
    mode = DATA_MODES[int(rng_data.choice(3, p=[0.7, 0.2, 0.1]))]
    return {"seed": seed, "kind": kind, "target": target, "program": prog, "steps": steps,
            "data": {"mode": mode, "seed": seed}}
