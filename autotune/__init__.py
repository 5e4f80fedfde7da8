"""Autotuning: template spaces, tuners, measurement, records and dispatch.

A template declares knobs on ``get_config()`` and returns ``(schedule, tensors)``;
:func:`tune` searches its space, measuring candidates in worker processes and appending
every trial to a JSON Lines records file; :func:`apply_history_best` makes later template
calls use the best record. The ``polytile`` command line (``polytile tune matmul``) wraps
all of it. Design: AutoTVM (TVM OSDI 2018; Chen et al., NeurIPS 2018), in our own code.
"""

from __future__ import annotations

from .cost_model import XGBCostModel
from .data import measure_numpy
from .dispatch import ApplyHistoryBest, apply_history_best, canonical_target, load_best
from .measure import LocalMeasurer, MeasureOptions, MeasureResult
from .records import (ERROR_CODES, SCHEMA_VERSION, Record, RecordWarning, RecordWriter,
                      read_records)
from .space import (AnnotateEntity, ConfigEntity, ConfigSpace, OtherOptionEntity,
                    ReorderEntity, SplitEntity)
from .template import (FallbackWarning, Template, Workload, get_config, get_template,
                       registered, template)
from .tune import DEFAULT_TRIALS, TuneResult, tune
from .tuner import GridTuner, ModelTuner, RandomTuner, Tuner, make_tuner

__all__ = [
    "AnnotateEntity", "ApplyHistoryBest", "ConfigEntity", "ConfigSpace", "DEFAULT_TRIALS",
    "ERROR_CODES", "FallbackWarning", "GridTuner", "LocalMeasurer", "MeasureOptions",
    "MeasureResult", "ModelTuner", "OtherOptionEntity", "RandomTuner", "Record",
    "RecordWarning", "RecordWriter", "ReorderEntity", "SCHEMA_VERSION", "SplitEntity",
    "Template", "TuneResult", "Tuner", "Workload", "XGBCostModel", "apply_history_best",
    "canonical_target", "get_config", "get_template", "load_best", "make_tuner",
    "measure_numpy", "read_records", "registered", "template", "tune",
]
