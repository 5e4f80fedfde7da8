"""Tuners: which configs of a space to measure next.

Every tuner proposes batches of config indices (``next_batch(n)``), never one it has
proposed or seen measured before, and learns from results (``update``).

* :class:`RandomTuner`: uniform samples without replacement.
* :class:`GridTuner`: indices in order.
* :class:`ModelTuner` (the default): an XGBoost ranking model (:mod:`.cost_model`) on
  loop-IR features (:mod:`.features`), retrained after every batch, picks each batch.
  Lowering a config to get its features costs tens of milliseconds (isl), so the search
  is a cascade: an evolutionary search whose population starts from the best measured
  configs and random samples, mutates one or two knobs at a time (half of the time a step
  to a neighbouring value) and crosses parents knob by knob, is steered by a second,
  cheap model of the same kind on the knob values themselves (no lowering) over a few
  thousand candidates; its best few dozen are lowered in the worker processes, and the
  loop-IR model ranks them. The batch takes the best ranked unmeasured configs,
  preferring ones that differ from each other in at least two knobs, plus an
  epsilon-greedy share of uniformly random configs (5 % of the trials, carried over from
  batch to batch, as the ``eps_greedy`` of AutoTVM's model-based tuner; optionally larger
  while the model ranks the configs it had not yet seen poorly:
  :meth:`ModelTuner.exploration`). Records of the same workload and target seed both
  models and are never re-measured. The method is that of Chen et al., "Learning to Optimize Tensor
  Programs" (NeurIPS 2018): a ranking model on features of the lowered program, retrained
  after every batch, with epsilon-greedy, diversity-aware batch selection.

Transfer (:meth:`ModelTuner.add_transfer`): measurements of *another* workload of the same
template (a nearby shape) are training data only, each workload a query group of the
ranking loss so that run times of different shapes are never compared; their configs are
never marked visited nor taken as this workload's best. Once this workload has
measurements, its group weighs as much as the largest transfer group
(:meth:`ModelTuner._group_weights`): its own runs, not the source's, steer the search.

Every tuner takes an optional ``candidates`` list: the search then proposes only those
configs (the replay benchmark, :mod:`.replay`, restricts it to the configs measured in
advance; the model tuner then ranks all unmeasured candidates instead of evolving).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import numpy as np

from polytile.errors import TuneError, format_error

from .cost_model import XGBCostModel, kendall_tau
from .space import ConfigSpace


class Tuner:
    """Base class: keeps the visited set and the best result."""

    name = "base"

    def __init__(self, space: ConfigSpace, seed: int | None = None,
                 candidates: list[int] | None = None):
        self.space = space
        self.rng = random.Random(seed)
        self.visited: set[int] = set()
        self.pool = sorted(set(candidates)) if candidates is not None else None

    def has_next(self) -> bool:
        if self.pool is not None:
            return any(i not in self.visited for i in self.pool)
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
        if self.pool is not None:
            free = [i for i in self.pool if i not in exclude]
            return self.rng.sample(free, min(n, len(free)))
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

    def __init__(self, space: ConfigSpace, seed: int | None = None,
                 candidates: list[int] | None = None):
        super().__init__(space, seed, candidates)
        self._next = 0

    def next_batch(self, n: int) -> list[int]:
        out = []
        order = self.pool if self.pool is not None else range(len(self.space))
        size = len(order)
        while len(out) < n and self._next < size:
            i = order[self._next]
            if i not in self.visited:
                out.append(i)
            self._next += 1
        self.visited.update(out)
        return out


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _list_width(knob) -> int:
    """How many numbers the values of a plain knob hold when every value is a list of
    numbers (a GPU GEMM's ``tile``: block, k and thread tile sides; a row template's
    ``layout``), else 0; the longest such list (shorter ones are padded). Cached on the
    knob."""
    w = getattr(knob, "_list_width", None)
    if w is None:
        vals = getattr(knob, "values", ())
        ok = vals and all(isinstance(v, (list, tuple)) and all(_number(x) for x in v)
                          for v in vals)
        w = max(len(v) for v in vals) if ok else 0
        knob._list_width = w
    return w


def knob_features(space: ConfigSpace, index: int) -> list[float]:
    """Numeric encoding of config ``index``'s knob values (for the cheap search model):
    log2 of split sizes, positions of reordered axes, annotation codes, value indices,
    and ``log2(1 + |x|)`` of numeric values, also of each number of a knob whose values
    are lists of numbers (the index of a GPU GEMM's ``tile`` among 2208 tiles orders
    nothing the trees could split on: the knob model ranked the configs of an H200
    2048^3 SGEMM pool with a Spearman rho of 0.14-0.21 from 8-32 of them, the loop-IR
    model with 0.56-0.87)."""
    out: list[float] = []
    for (name, knob), r in zip(space.knobs.items(), space.knob_indices(index)):
        e = knob.get(r)
        kind = knob.kind
        if kind == "split":
            inner = e.size[1:]
            outer = -(-knob.length // math.prod(inner))
            out += [math.log2(outer)] + [math.log2(f) for f in inner]
        elif kind == "reorder":
            out += [float(p) for p in e.perm]
        elif kind == "annotate":
            out += [float(("none", "unroll", "vec").index(a)) for a in e.anns]
        else:
            v = e.val
            out.append(float(r))
            w = _list_width(knob)
            if w:
                out += [math.log2(1 + abs(float(x))) for x in v] + [0.0] * (w - len(v))
            elif _any_number(knob):
                # one slot whatever the value: -1 for a knob's non-numeric values (the
                # tensor-core ``pad``: 8, 0 or "swizzle"), so every config has as many
                out.append(math.log2(1 + abs(float(v))) if _number(v) else -1.0)
    return out


def _any_number(knob) -> bool:
    """Whether some value of a plain knob is a number (cached on the knob)."""
    a = getattr(knob, "_any_number", None)
    if a is None:
        a = knob._any_number = any(_number(v) for v in getattr(knob, "values", ()))
    return a


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
        Share of the trials picked uniformly at random (the least, with ``adaptive``);
        the fraction of a random pick a batch cannot take is carried to the next batch,
        so a batch of 8 at 0.05 takes one every 2-3 batches. 0.05 as AutoTVM (Chen et
        al., NeurIPS 2018). Replays of ``benchmarks/pools`` (32 seeds) with 0.1, one
        random pick in every batch of 8, were 0.5-2.4 points behind at 16 and 24 trials
        on conv2d and softmax (matmul: within the noise, about 3 points).
    adaptive, max_epsilon :
        Raise the random share up to ``max_epsilon`` while the model's predictions for
        new batches rank them poorly (:meth:`exploration`). Off by default: on the CPU
        replay pools of ``benchmarks/pools`` (12 seeds) it lost 1-5 points at 24 to 64
        trials on matmul and conv2d and gained nothing on softmax (the configs the model
        picks are its best guesses, so the tau among them understates its skill).
    population, children, generations : int
        Size of the evolutionary search on the knob model per batch.
    lower_factor : int
        Candidates lowered (for loop-IR features) per batch slot: the shortlist the knob
        model passes to the loop-IR model. 2: lowering is most of the tuner's own time
        (a 256^3 matmul at load 15 on 2 cores: 1.08 s of lowering per trial at 3,
        against 0.02-0.06 s of training and search and 0.4-0.9 s of measurement), and replays
        of ``benchmarks/pools`` gained nothing from 3 (seeds 2000-2047, not those the
        choice was made on; fraction of the pool's best at 16 / 24 trials with 2
        against 3: matmul 0.906 / 0.945 against 0.903 / 0.948, conv2d 0.812 / 0.906
        against 0.805 / 0.903, softmax 0.983 / 0.997 against 0.985 / 0.993).
    min_train : int
        Successful measurements needed before the models propose (before: a first batch
        of ``2 * min_train`` configs, half neighbours of the default config, half random
        picks; unless transfer data is loaded). 4: with 2 (a first batch of 4) replays of
        ``benchmarks/pools`` (32 seeds) gained 0-3 points at 16 and 24 trials, within
        their seed-to-seed noise (about 3 points), but on the synthetic landscape of the
        tests a model trained on 4 configs lost up to 28 points at 12 to 24 trials.
    candidates : list of int, optional
        Propose only these configs (see the module docstring).
    """

    name = "model"

    def __init__(self, space: ConfigSpace, featurize: Callable, seed: int | None = None,
                 epsilon: float = 0.05, population: int = 64, children: int = 256,
                 generations: int = 4, lower_factor: int = 2, min_train: int = 4,
                 candidates: list[int] | None = None, adaptive: bool = False,
                 max_epsilon: float = 0.5):
        super().__init__(space, seed, candidates)
        self.featurize = featurize
        self.epsilon = epsilon
        self.adaptive = adaptive
        self.max_epsilon = max_epsilon
        self._explore_credit = 0.0  # random picks owed (fractions carried over batches)
        self._knob_cache: dict[int, list[int]] = {}  # index -> knob value indices
        #: how well the loop-IR model ranked the configs measured since it was trained
        #: (Kendall tau over the last few batches, see :meth:`exploration`; None before)
        self.skill: float | None = None
        self._skill_log: list[tuple[list, list]] = []   # (predictions, targets) per batch
        self.population = population
        self.children = children
        self.generations = generations
        self.lower_factor = lower_factor
        self.min_train = min_train
        self.model = XGBCostModel(seed=seed or 0)
        self.knob_model = XGBCostModel(seed=seed or 0)
        self.feats: dict[int, list | None] = {}
        self.costs: dict[int, float] = {}   # index -> seconds (inf on failure)
        self.invalid: set[int] = set()     # configs that failed to lower while searching
        self.dims = space.dims()
        self._dirty = False
        #: transfer data: per source workload, (loop-IR features, targets in [0, 1],
        #: knob features or None)
        self.transfer: list[tuple[list, list, list | None]] = []

    # ----------------------------------------------------------------- learning
    def update(self, indices: list[int], results: list) -> None:
        super().update(indices, results)
        if self.adaptive and self.model.trained:
            self._score_batch(indices, results)
        for i, r in zip(indices, results):
            self.costs[i] = r.cost if r.ok else math.inf
            if getattr(r, "features", None) is not None:
                self.feats[i] = r.features
        self._dirty = True

    def _score_batch(self, indices: list[int], results: list) -> None:
        """Prequential check of the model: its predictions for a batch it has not been
        trained on, against the measured throughputs (failures lowest)."""
        rows = [(r.features, 1.0 / r.cost if r.ok else 0.0) for r in results
                if getattr(r, "features", None) is not None]
        if len(rows) < 2:
            return
        pred = self.model.predict([f for f, _ in rows])
        self._skill_log = (self._skill_log + [(list(pred), [y for _, y in rows])])[-3:]
        pairs = [kendall_tau(p, y) for p, y in self._skill_log]
        pairs = [t for t in pairs if t is not None]
        self.skill = sum(pairs) / len(pairs) if pairs else None

    def load_history(self, indices: list[int], results: list) -> None:
        self.update(indices, results)
        missing = [i for i in indices if i not in self.feats]
        if missing:
            self.feats.update(self.featurize(missing))

    def add_transfer(self, features: list, costs: list, knob_feats: list | None = None
                     ) -> int:
        """Measurements of another workload of the same template as training data (one
        query group): ``features`` (loop-IR feature vectors, None for configs that did
        not lower: skipped), ``costs`` (seconds, ``inf`` for failures) and optionally the
        configs' :func:`knob_features` in *their* space (used by the knob model when as
        long as this space's). The configs are not marked visited. Returns the number
        of rows kept."""
        ok = [c for c in costs if math.isfinite(c) and c > 0]
        if not ok:
            return 0
        best = min(ok)
        keep = [k for k, f in enumerate(features) if f is not None]
        if len(keep) < 2:
            return 0
        ys = [best / costs[k] if math.isfinite(costs[k]) and costs[k] > 0 else 0.0
              for k in keep]
        kf = None
        if knob_feats is not None:
            width = len(knob_features(self.space, self.space.default_index()))
            if all(len(knob_feats[k]) == width for k in keep):
                kf = [list(knob_feats[k]) for k in keep]
        self.transfer.append(([list(features[k]) for k in keep], ys, kf))
        self._dirty = True
        return len(keep)

    def _train(self) -> bool:
        ok = [c for c in self.costs.values() if math.isfinite(c)]
        if len(ok) < self.min_train and not self.transfer:
            return False
        best = min(ok) if ok else 1.0

        def y(c):
            return best / c if math.isfinite(c) else 0.0
        if self._dirty:
            data = [(self.feats[i], c) for i, c in self.costs.items()
                    if self.feats.get(i) is not None]
            xs = [f for f, _ in data]
            ys = [y(c) for _, c in data]
            groups = [len(xs)] if xs else [0]
            known = list(self.costs) + [i for i in self.invalid if i not in self.costs]
            kx = [knob_features(self.space, i) for i in known]
            ky = [y(self.costs.get(i, math.inf)) for i in known]
            kgroups = [len(kx)] if kx else [0]
            for f, yt, kf in self.transfer:
                xs += f
                ys += yt
                groups.append(len(f))
                if kf is not None:
                    kx += kf
                    ky += yt
                    kgroups.append(len(kf))
            self.model.fit(xs, ys, *self._group_weights(groups))
            self.knob_model.fit(kx, ky, *self._group_weights(kgroups))
            self._dirty = False
        return self.model.trained

    def _group_weights(self, groups: list) -> tuple:
        """``(groups, weights)`` for the cost models from ``groups`` (this workload's
        rows first, possibly 0, then each transfer group): one group and no weights
        without transfer data; else this workload's group, when it has rows, weighs as
        much as the largest transfer group whatever its size. Unweighted, the transfer
        rows held the model to the source shape's landscape: softmax 512x1024 warm-started
        from 1024x512 (CPU replay pools, 16 seeds) found its pool's best in a median 28.5
        trials (0.959 of it at 16 trials); weighted, in 11 (0.995). On a second pair of
        pools of the same shapes, timed at lower load, 11 and 9 trials."""
        if not self.transfer:
            return None, None
        weights = [1.0] * len(groups)
        if groups[0]:
            weights[0] = max(1.0, max(groups[1:], default=1) / groups[0])
        else:
            groups, weights = groups[1:], weights[1:]
        return groups, weights

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
            got = self.featurize(need)
            self.feats.update(got)
            bad = [i for i in need if got.get(i) is None]
            if bad:  # configs that do not lower: never proposed, taught to the knob model
                self.invalid.update(bad)
                self.visited.update(bad)
                self._dirty = True

    def exploration(self) -> float:
        """Share of the next batch picked uniformly at random: ``epsilon`` when the
        loop-IR model ranked the configs measured since its last training well (Kendall
        tau :attr:`skill` between its predictions and the measured throughputs, the mean
        over the last three batches, of 0.5 or more), rising linearly to ``max_epsilon``
        at a tau of 0 or below: a model that cannot rank configs it has not seen spends
        half the batch on random ones, so that the search does not fall behind random
        search on landscapes its features do not capture. The check is prequential (each
        batch scored by the model before it learns from it): free, where
        cross-validation would cost several fits per batch (about 1-3 s each on a
        loaded 2-core machine). ``epsilon`` without ``adaptive`` or an estimate."""
        if not self.adaptive or self.skill is None:
            return self.epsilon
        t = min(1.0, max(0.0, self.skill / 0.5))
        return self.max_epsilon + t * (self.epsilon - self.max_epsilon)

    def _score(self, indices: list[int]) -> dict:
        valid = [i for i in indices if self.feats.get(i) is not None]
        if not valid:
            return {}
        pred = self.model.predict([self.feats[i] for i in valid])
        return dict(zip(valid, (float(p) for p in pred)))

    def _knob_score(self, indices: list[int]) -> dict:
        if not indices:
            return {}
        pred = self.knob_model.predict([knob_features(self.space, i) for i in indices])
        return dict(zip(indices, (float(p) for p in pred)))

    def _neighbours(self, idx: int, n: int) -> list[int]:
        """Up to ``n`` unvisited configs (of the pool, if any) differing from ``idx`` in
        one knob, at random."""
        ki = self.space.knob_indices(idx)
        pool = set(self.pool) if self.pool is not None else None
        near = []
        for k, d in enumerate(self.dims):
            for r in range(d):
                if r != ki[k]:
                    j = self.space.index_from_knobs(ki[:k] + [r] + ki[k + 1:])
                    if j not in self.visited and (pool is None or j in pool):
                        near.append(j)
        return self.rng.sample(near, min(n, len(near)))

    def _knobs_of(self, idx: int) -> list[int]:
        k = self._knob_cache.get(idx)
        if k is None:
            k = self._knob_cache[idx] = self.space.knob_indices(idx)
        return k

    def _distance(self, a: int, b: int) -> int:
        return sum(x != y for x, y in zip(self._knobs_of(a), self._knobs_of(b)))

    def _diverse(self, ranked: list[int], n: int) -> list[int]:
        """The first ``n`` of ``ranked``, preferring picks two or more knobs apart."""
        picks: list[int] = []
        for i in ranked:
            if len(picks) == n:
                break
            if all(self._distance(i, j) >= 2 for j in picks):
                picks.append(i)
        for i in ranked:
            if len(picks) == n:
                break
            if i not in picks:
                picks.append(i)
        return picks

    def _evolve(self) -> dict:
        """Knob-model scores of the candidates visited by the evolutionary search."""
        measured = sorted((c, i) for i, c in self.costs.items() if math.isfinite(c))
        elite = [i for _, i in measured[:8]]
        pop = elite + self._random_unvisited(self.population - len(elite))
        scores = self._knob_score(pop)
        for _ in range(self.generations):
            kids = set()
            for _ in range(self.children):
                if len(pop) > 1 and self.rng.random() < 0.25:
                    a, b = self.rng.sample(pop, 2)
                    kid = self._cross(a, b)
                    if self.rng.random() < 0.5:
                        kid = self._mutate(kid)
                else:
                    kid = self._mutate(self.rng.choice(pop))
                if kid not in self.visited and kid not in scores:
                    kids.add(kid)
            scores.update(self._knob_score(sorted(kids)))
            ranked = sorted(scores, key=lambda i: -scores[i])
            pop = list(dict.fromkeys(elite[:4] + ranked[: self.population]))
        return {i: v for i, v in scores.items() if i not in self.visited}

    def _pool_scores(self) -> dict:
        """Knob-model scores of the unvisited candidates (a sample of 4096 of them when
        there are more)."""
        free = [i for i in self.pool if i not in self.visited]
        if len(free) > 4096:
            free = self.rng.sample(free, 4096)
        return self._knob_score(free)

    def next_batch(self, n: int) -> list[int]:
        if not self._train():
            # no more configs than the model needs to start: it picks the rest. Half are
            # neighbours of the default (one knob changed): the hand-written default is
            # usually near the best, the other half spreads over the space
            k = min(n, 2 * self.min_train)
            out = self._neighbours(self.space.default_index(), k // 2)
            out += self._random_unvisited(k - len(out), exclude=set(out))
            self.visited.update(out)
            return out
        self._explore_credit += self.exploration() * n
        n_random = min(n, int(self._explore_credit + 1e-9))
        self._explore_credit -= n_random
        n_model = n - n_random
        cheap = self._pool_scores() if self.pool is not None else self._evolve()
        ranked = sorted(cheap, key=lambda i: -cheap[i])
        shortlist = self._diverse(ranked, self.lower_factor * n_model)
        self._ensure_features(shortlist)
        scores = self._score(shortlist)
        picks = self._diverse(sorted(scores, key=lambda i: -scores[i]), n_model)
        picks += self._random_unvisited(n - len(picks), exclude=set(picks))
        self.visited.update(picks)
        return picks

    def predicted(self, indices: list[int]) -> np.ndarray:
        """Loop-IR model scores of ``indices`` (for tests and diagnostics)."""
        self._ensure_features(indices)
        s = self._score(indices)
        return np.array([s.get(i, -np.inf) for i in indices])


def make_tuner(name: str, space: ConfigSpace, featurize: Callable | None = None,
               seed: int | None = None, candidates: list[int] | None = None) -> Tuner:
    """A tuner by name: ``"model"``, ``"random"`` or ``"grid"`` (``candidates``: propose
    only these configs)."""
    if name == "random":
        return RandomTuner(space, seed, candidates)
    if name == "grid":
        return GridTuner(space, seed, candidates)
    if name == "model":
        if featurize is None:
            raise TuneError(format_error("tuner", "the model tuner needs a featurize function"))
        return ModelTuner(space, featurize, seed, candidates=candidates)
    autotvm = {"xgb": "model", "xgb_knob": "model", "xgb_itervar": "model",
               "xgb_curve": "model", "ga": "model", "gridsearch": "grid"}.get(name)
    raise TuneError(format_error("tuner", f"unknown tuner {name!r}",
                                 "expected 'model', 'random' or 'grid'",
                                 hint=f"AutoTVM's {name!r} is closest to {autotvm!r} (a cost "
                                 "model guiding the search)" if autotvm == "model" else
                                 f"AutoTVM's {name!r} is {autotvm!r}" if autotvm else None))
