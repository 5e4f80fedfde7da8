"""Cases from seeds: ``generate(seed, target)`` is a pure function of its arguments."""

from __future__ import annotations

import numpy as np

from .kinds import GENERATORS, extend
from .programs import KINDS, Gen
from .schedules import generate_steps

#: mixed into every seed, so that changing the generators can start a fresh sequence
SEED_BASE = 20_261_201
DATA_MODES = ("uniform", "grid", "nan")
#: seeds from here on are *extended*: they draw from every kind (``KINDS``) and add
#: symbolic sizes, extra outputs and more schedule primitives (see :func:`.kinds.extend`,
#: :mod:`.schedules`); seeds below keep the six first kinds and their original random
#: streams, so the seeds named in reports and in ``FIXED_FAULTS`` still reproduce
EXTENDED_FROM = 60_000
#: seeds from here on draw more schedules too (see :mod:`.schedules`): ``vthread`` bindings,
#: ``create_group`` with attaches inside the group, rfactor followed by compute_at or
#: parallel, double_buffer after attaches, the spatial loops of a ``te.scan`` bound on
#: ``cuda`` (and scans drawn twice as often there); seeds below keep their cases
EXTENDED2_FROM = 70_000
#: seeds from here on: every other seed (the even ones) is an ``xreduce`` case, a reduction
#: over wide reduce axes scheduled as a cross-thread reduction on ``cuda`` (threadIdx.x on
#: the reduce axis, with or without rfactor, 32/64/128 or 48... threads, with ``vthread``
#: and threadIdx.y bindings of the spatial loops) and rfactor'd on ``llvm`` (see
#: :meth:`.schedules.SchedGen.xreduce`); the odd ones draw as ``EXTENDED2_FROM`` seeds do;
#: seeds below keep their cases
EXTENDED3_FROM = 80_000
#: seeds from here on: the even ones are ``tuplered`` cases, tuple reductions with
#: independent combiners per element (``te.comm_reducer`` over (sum, sum of squares), (min,
#: max), (argmax, count)... in fp32/fp16/int32, maybe read from a multi-output producer,
#: maybe read by a multi-output epilogue; :func:`.kinds.tuplered`) scheduled with rfactor,
#: split/reorder of the reduce loops, parallel/vectorize on ``llvm`` and cross-thread
#: bindings on ``cuda`` (:meth:`.schedules.SchedGen.tuplered`); the odd ones draw as
#: ``EXTENDED3_FROM`` seeds do (half of them ``xreduce``); seeds below keep their cases
EXTENDED4_FROM = 90_000
#: seeds from here on: every third seed (``seed % 3 == 1``) is a ``norm`` case, two
#: reductions chained over the same rows as softmax and layer norm are written (``M`` over
#: the rows, ``E`` of ``A`` and ``M``, ``S`` the sum of ``E``, ``O`` of ``E`` and ``S``;
#: :func:`.kinds.norm`), scheduled with TVM's softmax idioms (reductions and ``E`` computed
#: at the rows of ``O`` or inlined, cross-thread reductions per row on ``cuda``, rfactor and
#: vectorize on ``llvm``; :meth:`.schedules.SchedGen.norm`) then random steps; the other
#: seeds draw as ``EXTENDED4_FROM`` seeds do
EXTENDED5_FROM = 110_000
#: every kind a seed may draw (``KINDS`` stays as it was: older seeds index it)
ALL_KINDS = KINDS + ("xreduce", "tuplered", "norm")


def kind_of(seed: int, target: str = "llvm") -> str:
    """The kind of program of ``seed`` for ``target``."""
    if seed >= EXTENDED5_FROM and seed % 3 == 1:
        return "norm"
    kinds = KINDS if seed >= EXTENDED_FROM else KINDS[:6]
    if seed >= EXTENDED2_FROM and target == "cuda":
        kinds = KINDS + ("scan",)
    if seed >= EXTENDED4_FROM:  # (odd seeds: every other one xreduce, as from EXTENDED3_FROM)
        if seed % 2 == 0:
            return "tuplered"
        return "xreduce" if seed // 2 % 2 == 0 else kinds[seed // 4 % len(kinds)]
    if seed >= EXTENDED3_FROM:
        return "xreduce" if seed % 2 == 0 else kinds[seed // 2 % len(kinds)]
    return kinds[seed % len(kinds)]


def generate(seed: int, target: str = "llvm") -> dict:
    """The case of ``seed`` for ``target`` (``llvm`` or ``cuda``): a program of kind
    :func:`kind_of`, a random schedule and a data mode (see :mod:`.spec`)."""
    # one stream each for the program, the schedule and the data: the program and the data
    # of a seed do not depend on which steps the compiler accepts
    t = 0 if target == "llvm" else 1
    rng_prog, rng_sched, rng_data = (np.random.default_rng([SEED_BASE, seed, t, k])
                                     for k in range(3))
    kind = kind_of(seed, target)
    ext = seed >= EXTENDED_FROM
    g = Gen(rng_prog, extended=ext)
    prog = GENERATORS[kind](g)
    if ext:
        prog = extend(g, prog)
    try:
        steps = generate_steps(rng_sched, prog, target, extended=ext,
                               extended2=seed >= EXTENDED2_FROM,
                               xreduce=kind == "xreduce", tuplered=kind == "tuplered",
                               norm=kind == "norm")
    except Exception:  # noqa: BLE001 - the program itself does not build: the runner says so
        steps = []
    mode = DATA_MODES[int(rng_data.choice(3, p=[0.7, 0.2, 0.1]))]
    return {"seed": seed, "kind": kind, "target": target, "program": prog, "steps": steps,
            "data": {"mode": mode, "seed": seed}}
