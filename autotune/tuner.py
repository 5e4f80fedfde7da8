"""Tuners: which configs of a space to measure next.

Every tuner proposes batches of config indices (``next_batch(n)``), never one it has
proposed or seen measured before, and learns from results (``update``).

* :class:`RandomTuner`: uniform samples without replacement.
* :class:`GridTuner`: indices in order.
* :class:`ModelTuner` (the default): an XGBoost ranking model (:mod:`.cost_model`) on
  loop-IR features (:mod:`.features`), retrained after every batch; proposals come from
  an evolutionary search whose population starts from the best measured configs and
  random samples, mutates one or two knobs at a time (half of the time a step to a
  neighbouring value), crosses parents knob by knob, and keeps the candidates the model
  ranks highest. The batch takes the best predicted unmeasured configs, preferring ones
  that differ from each other in at least two knobs, plus an epsilon-greedy share of
  uniformly random configs. Records of the same workload and target seed the model
  (transfer) and are never re-measured.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import numpy as np

from .cost_model import XGBCostModel
from .space import ConfigSpace


class Tuner:
    """Base class: keeps the visited set and the best result."""

    name = "base"

    def __init__(self, space: ConfigSpace, seed: int | None = None):
        self.space = space
        self.rng = random.Random(seed)
        self.visited: set[int] = set()

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def next_batch(self, n: int) -> list[int]:
        raise NotImplementedError

    def update(self, indices: list[int], results: list) -> None:
        """Learn from measured ``results`` (objects with ``ok``, ``cost``, ``features``)."""
        self.visited.update(indices)

    def load_history(self, indices: list[int], results: list) -> None:
        """Results measured before this tuner started (resume or transfer)."""
        self.update(indices, results)

    def _random_unvisited(self, n: int, exclude: set | None = None) -> list[int]:
        exclude = self.visited | (exclude or set())
        size = len(self.space)
        out: list[int] = []
        taken = set()
        tries = 0
        while len(out) < n and tries < 50 * n + 100:
            tries += 1
            i = self.rng.randrange(size)
            if i not in exclude and i not in taken:
                out.append(i)
                taken.add(i)
        if len(out) < n and size - len(exclude) - len(taken) > 0:
            start = self.rng.randrange(size)
            for k in range(size):
                i = (start + k) % size
                if i not in exclude and i not in taken:
                    out.append(i)
                    taken.add(i)
                    if len(out) == n:
                        break
        return out


class RandomTuner(Tuner):
    """Uniform random configs, without repetition."""

    name = "random"

    def next_batch(self, n: int) -> list[int]:
        out = self._random_unvisited(n)
        self.visited.update(out)
        return out


class GridTuner(Tuner):
    """Configs in index order (the last knob varies fastest)."""

    name = "grid"

    def __init__(self, space: ConfigSpace, seed: int | None = None):
        super().__init__(space, seed)
        self._next = 0

    def next_batch(self, n: int) -> list[int]:
        out = []
        size = len(self.space)
        while len(out) < n and self._next < size:
            if self._next not in self.visited:
                out.append(self._next)
            self._next += 1
        self.visited.update(out)
        return out


class ModelTuner(Tuner):
    """Cost-model-guided evolutionary search; see the module docstring.

    Parameters
    ----------
    space : ConfigSpace
    featurize : callable
        ``featurize(indices) -> {index: feature list or None}`` (None: the config does not
        lower, so it is never proposed). The tuning loop extracts features in the worker
        processes.
    seed : int
    epsilon : float
        Share of each batch picked uniformly at random.
    population, children, generations : int
        Size of the evolutionary search per batch (each new child costs one feature
        extraction, cached).
    min_train : int
        Successful measurements needed before the model proposes (random picks before).
    """

    name = "model"

    def __init__(self, space: ConfigSpace, featurize: Callable, seed: int | None = None,
                 epsilon: float = 0.1, population: int = 16, children: int = 32,
                 generations: int = 2, min_train: int = 4):
        super().__init__(space, seed)
        self.featurize = featurize
        self.epsilon = epsilon
        self.population = population
        self.children = children
        self.generations = generations
        self.min_train = min_train
        self.model = XGBCostModel(seed=seed or 0)
        self.feats: dict[int, list | None] = {}
        self.costs: dict[int, float] = {}   # index -> seconds (inf on failure)
        self.dims = space.dims()
        self._dirty = False

    # ----------------------------------------------------------------- learning
    def update(self, indices: list[int], results: list) -> None:
        super().update(indices, results)
        for i, r in zip(indices, results):
            self.costs[i] = r.cost if r.ok else math.inf
            if getattr(r, "features", None) is not None:
                self.feats[i] = r.features
        self._dirty = True

    def load_history(self, indices: list[int], results: list) -> None:
        self.update(indices, results)
        missing = [i for i in indices if i not in self.feats]
        if missing:
            self.feats.update(self.featurize(missing))

    def _train(self) -> bool:
        data = [(self.feats[i], c) for i, c in self.costs.items()
                if self.feats.get(i) is not None]
        ok = [c for _, c in data if math.isfinite(c)]
        if len(ok) < self.min_train:
            return False
        best = min(ok)
        xs = [f for f, _ in data]
        ys = [best / c if math.isfinite(c) else 0.0 for _, c in data]
        if self._dirty:
            self.model.fit(xs, ys)
            self._dirty = False
        return self.model.trained

    # ----------------------------------------------------------------- search
    def _mutate(self, idx: int) -> int:
        ki = self.space.knob_indices(idx)
        movable = [k for k, d in enumerate(self.dims) if d > 1]
        if not movable:
            return idx
        for _ in range(1 if self.rng.random() < 0.7 else 2):
            k = self.rng.choice(movable)
            d = self.dims[k]
            if self.rng.random() < 0.5:
                step = self.rng.choice((-2, -1, 1, 2))
                ki[k] = min(d - 1, max(0, ki[k] + step))
            else:
                ki[k] = self.rng.randrange(d)
        return self.space.index_from_knobs(ki)

    def _cross(self, a: int, b: int) -> int:
        ka, kb = self.space.knob_indices(a), self.space.knob_indices(b)
        return self.space.index_from_knobs([x if self.rng.random() < 0.5 else y
                                            for x, y in zip(ka, kb)])

    def _ensure_features(self, indices) -> None:
        need = [i for i in dict.fromkeys(indices) if i not in self.feats]
        if need:
            self.feats.update(self.featurize(need))

    def _score(self, indices: list[int]) -> dict:
        valid = [i for i in indices if self.feats.get(i) is not None]
        if not valid:
            return {}
        pred = self.model.predict([self.feats[i] for i in valid])
        return dict(zip(valid, (float(p) for p in pred)))

    def _distance(self, a: int, b: int) -> int:
        return sum(x != y for x, y in zip(self.space.knob_indices(a),
                                          self.space.knob_indices(b)))

    def next_batch(self, n: int) -> list[int]:
        if not self._train():
            out = self._random_unvisited(n)
            self.visited.update(out)
            return out
        measured = sorted((c, i) for i, c in self.costs.items() if math.isfinite(c))
        pop = [i for _, i in measured[: self.population // 2]]
        pop += self._random_unvisited(self.population - len(pop))
        self._ensure_features(pop)
        scores: dict = {}
        scores.update(self._score(pop))
        for _ in range(self.generations):
            kids = []
            for _ in range(self.children):
                if len(pop) > 1 and self.rng.random() < 0.25:
                    a, b = self.rng.sample(pop, 2)
                    kid = self._mutate(self._cross(a, b)) if self.rng.random() < 0.5 \
                        else self._cross(a, b)
                else:
                    kid = self._mutate(self.rng.choice(pop))
                if kid not in self.visited:
                    kids.append(kid)
            self._ensure_features(kids)
            scores.update(self._score(kids))
            ranked = sorted(scores, key=lambda i: -scores[i])
            keep_measured = [i for _, i in measured[:4]]
            pop = list(dict.fromkeys(keep_measured + ranked[: self.population]))
        cands = [i for i in sorted(scores, key=lambda i: -scores[i]) if i not in self.visited]
        n_random = min(n, max(0, int(round(self.epsilon * n))))
        n_model = n - n_random
        picks: list[int] = []
        for i in cands:  # first pass: keep picks at least two knobs apart
            if len(picks) == n_model:
                break
            if all(self._distance(i, j) >= 2 for j in picks):
                picks.append(i)
        for i in cands:
            if len(picks) == n_model:
                break
            if i not in picks:
                picks.append(i)
        picks += self._random_unvisited(n - len(picks), exclude=set(picks))
        self.visited.update(picks)
        return picks

    def predicted(self, indices: list[int]) -> np.ndarray:
        """Model scores of ``indices`` (for tests and diagnostics)."""
        self._ensure_features(indices)
        s = self._score(indices)
        return np.array([s.get(i, -np.inf) for i in indices])


def make_tuner(name: str, space: ConfigSpace, featurize: Callable | None = None,
               seed: int | None = None) -> Tuner:
    """A tuner by name: ``"model"``, ``"random"`` or ``"grid"``."""
    from polytile.errors import TuneError, format_error

    if name == "random":
        return RandomTuner(space, seed)
    if name == "grid":
        return GridTuner(space, seed)
    if name == "model":
        if featurize is None:
            raise TuneError(format_error("tuner", "the model tuner needs a featurize function"))
        return ModelTuner(space, featurize, seed)
    raise TuneError(format_error("tuner", f"unknown tuner {name!r}",
                                 "expected 'model', 'random' or 'grid'"))
