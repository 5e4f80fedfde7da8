"""The cost model: gradient-boosted trees ranking configs by predicted throughput.

XGBoost (``xgboost``/``xgboost-cpu``) with the pairwise ranking objective
``rank:pairwise``, as in Chen et al., "Learning to Optimize Tensor Programs" (NeurIPS 2018):
the tuner only needs to *order* candidates, and a ranking loss is insensitive to the scale
of the workload's run times, so records of several runs mix well. XGBoost rather than
scikit-learn because it has that objective built in, trains on a few hundred samples in
milliseconds, and needs no further dependency than numpy and scipy.

Training targets are throughputs normalised per workload to ``[0, 1]`` (failed configs
are 0). Inputs are the loop-IR features of :mod:`.features`.
"""

from __future__ import annotations

import numpy as np

from polytile.errors import TuneError, format_error


def _xgb():
    try:
        import xgboost
    except ImportError:  # pragma: no cover - xgboost is a dependency
        raise TuneError(format_error("cost model", "xgboost is not installed",
                                     "pip install xgboost-cpu (or use --tuner random)"))
    return xgboost


class XGBCostModel:
    """Pairwise-ranking gradient-boosted trees over loop-IR features.

    Parameters
    ----------
    num_rounds : int
        Boosting rounds per fit, at most: a fit on ``n`` rows uses ``min(num_rounds,
        20 + n // 2)``, since a few dozen measurements cannot support more trees without
        fitting their noise (on replayed softmax searches, 30 rounds instead of 80 at
        16 to 32 measurements reached 95 % of the best in a quarter fewer trials).
    seed : int
    """

    def __init__(self, num_rounds: int = 80, seed: int = 0):
        self.num_rounds = num_rounds
        self.seed = seed
        self.params = {"max_depth": 4, "eta": 0.25, "gamma": 1e-4, "min_child_weight": 1,
                       "subsample": 0.9, "lambda": 1.0, "alpha": 0.0,
                       "objective": "rank:pairwise", "nthread": 1, "verbosity": 0,
                       "seed": seed}
        self.booster = None

    def fit(self, xs, ys, groups=None, weights=None) -> None:
        """Train on features ``xs`` (n x F) and normalised throughputs ``ys`` (n,).

        ``groups`` (sizes of consecutive runs of rows, summing to n): the pairwise loss
        only compares rows of the same group, so throughputs of different workloads
        (records of another shape, used for transfer) are never ranked against each
        other. None: one group. ``weights``: one per group (XGBoost weighs the ranking
        loss per query group), default 1."""
        xgb = _xgb()
        x = np.asarray(xs, dtype=np.float32)
        y = np.asarray(ys, dtype=np.float32)
        if len(x) < 2 or float(y.max() - y.min()) <= 0:
            self.booster = None
            return
        if groups is not None and sum(groups) != len(x):
            raise TuneError(format_error("cost model", f"groups sum to {sum(groups)}, "
                                         f"expected {len(x)} rows"))
        if weights is not None and (groups is None or len(weights) != len(groups)):
            raise TuneError(format_error("cost model", "one weight per group expected"))
        # nthread=1: the default (every core) made building the matrix of a few dozen
        # rows cost 10-90 ms on a loaded 2-core machine (OpenMP threads waiting for a
        # core), more than the training itself; 3 ms with one thread
        dtrain = xgb.DMatrix(x, label=y, nthread=1)
        if groups is not None:
            dtrain.set_group([int(g) for g in groups])
            if weights is not None:
                dtrain.set_weight(np.asarray(weights, dtype=np.float32))
        rounds = min(self.num_rounds, 20 + len(x) // 2)
        self.booster = xgb.train(self.params, dtrain, num_boost_round=rounds)

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def predict(self, xs) -> np.ndarray:
        """Scores (higher is predicted faster); zeros before training."""
        x = np.asarray(xs, dtype=np.float32)
        if self.booster is None or len(x) == 0:
            return np.zeros(len(x))
        return self.booster.predict(_xgb().DMatrix(x, nthread=1))



def kendall_tau(pred, ys) -> float | None:
    """Kendall's tau-a between scores ``pred`` and targets ``ys`` (-1..1, 0 for an order
    unrelated to the targets) over the pairs whose targets differ (a tie in ``pred``
    counts 0); None without such a pair."""
    p = np.asarray(pred, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    dy = np.sign(y[:, None] - y[None, :])
    dp = np.sign(p[:, None] - p[None, :])
    mask = np.triu(dy != 0, 1)
    if not mask.any():
        return None
    return float((dy * dp)[mask].mean())
