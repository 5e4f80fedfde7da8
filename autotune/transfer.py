"""Transfer learning across shapes: records of one workload warm-start the cost model of
another workload of the same template (a nearby shape).

A config of ``matmul(1024, 1024, 1024)`` is not a config of ``matmul(1024, 1024, 768)``
(split factors depend on the extents), so records of another shape are never measured,
counted or applied here: they are *training data*. Each source config is lowered for its
own shape and its loop-IR features (:mod:`.features`) describe that loop nest; the model
(:meth:`.tuner.ModelTuner.add_transfer`) learns which loop-nest properties are fast and
ranks the target shape's candidates with it. The source's knob values, encoded in the
source's space, also train the cheap knob model when both spaces have the same knobs.
Idea: the transfer learning of Chen et al., "Learning to Optimize Tensor Programs"
(NeurIPS 2018), section 4 (features invariant to the workload); our own code.
"""

from __future__ import annotations

import math

from . import sizes
from .features import extract_features
from .gpu_limits import use as gpu_limits_use
from .records import Record, target_matches
from .template import Template, Workload

#: Records of one source workload used at most (the fastest half, the rest sampled evenly):
#: lowering each costs tens of milliseconds here.
MAX_PER_SOURCE = 256


def transfer_sources(records: list[Record], wl: Workload, target: str,
                     device_ok=lambda d: True) -> dict:
    """Records usable as transfer data for ``wl`` on ``target``: same template, dtype and
    target (and device class through ``device_ok``), *other* arguments. Returns
    ``{args tuple: [Record]}`` (search trials only)."""
    out: dict = {}
    for r in records:
        w = r.workload
        if (r.phase != "search" or w.get("template") != wl.template
                or w.get("dtype", "float32") != wl.dtype
                or tuple(w.get("args", ())) == tuple(wl.args)
                or not target_matches(r.target, target) or not device_ok(r.device)):
            continue
        out.setdefault(tuple(w["args"]), []).append(r)
    return out


def _subset(recs: list[Record], limit: int) -> list[Record]:
    recs = sorted(recs, key=lambda r: r.cost)
    if len(recs) <= limit:
        return recs
    head = recs[: limit // 2]
    rest = recs[limit // 2:]
    step = len(rest) / (limit - len(head))
    return head + [rest[int(k * step)] for k in range(limit - len(head))]


def config_features(t: Template, args: tuple, dtype: str, target: str, configs: list,
                    limits=None) -> tuple[list, list]:
    """Loop-IR features and :func:`.tuner.knob_features` of ``configs`` (knob-value dicts)
    of ``t`` at ``args``, lowered here (``None`` / ``[]`` for a config that no longer fits
    the space or does not lower)."""
    from polytile.schedule.pipeline import lower

    from .tuner import knob_features

    with gpu_limits_use(limits):
        space = t.space(args, dtype, target)
    feats, kfs = [], []
    for knobs in configs:
        f, kf = None, []
        try:
            cfg = space.from_json(knobs)
            with gpu_limits_use(limits):
                s, tensors = t.instantiate(cfg, args, dtype, target)
                func = lower(s, tensors, target=target, stop_after="storage_flattening")
            f = extract_features(func, sizes.sizes_of(args))
            kf = knob_features(space, cfg.index)
        except Exception:  # a config that no longer applies here: no features
            f, kf = None, []
        feats.append(f)
        kfs.append(kf)
    return feats, kfs


def source_data(t: Template, args: tuple, dtype: str, target: str, records: list[Record],
                limits=None, limit: int = MAX_PER_SOURCE):
    """``(features, costs, knob_features)`` of ``records`` of ``t`` at ``args`` (at most
    ``limit`` of them), lowered here for that shape (:func:`config_features`; costs in
    seconds, ``inf`` for failed trials)."""
    recs = _subset(records, limit)
    feats, kfs = config_features(t, args, dtype, target, [r.config for r in recs], limits)
    return feats, [r.cost if r.ok else math.inf for r in recs], kfs
