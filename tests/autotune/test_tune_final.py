"""The end of a tuning run: the fastest configs of the search and the default are
re-measured alternately with the anchors, and the re-measure picks the best (a search
never reports a config below its default because of the noise of one measurement)."""

from __future__ import annotations

from polytile.autotune.anchors import Comparison
from polytile.autotune.records import Record, RecordWriter, read_records
from polytile.autotune.template import Workload
from polytile.autotune.timing import Timing
from polytile.autotune.tune import TuneResult, _compare_best, finalists

WL = Workload("matmul", (64, 64, 64), "float16")


def _rec(tile: int, cost: float, error: str | None = None) -> Record:
    return Record(workload=WL.key(), target="cuda -arch=sm_90a", config={"tile": tile},
                  costs=[] if error else [cost] * 3, error=error)


class _Measurer:
    """``compare`` of a measurer whose configs take the seconds of ``remeasured``
    (config tile -> seconds), the torch anchor 1.0 s, in 2 rounds."""

    def __init__(self, remeasured: dict):
        self.remeasured = remeasured
        self.asked: list = []

    def compare(self, items, anchors, rounds, **kw):
        self.asked = [(n, k["tile"]) for n, k in items]
        cmp = Comparison([n for n, _ in items], list(anchors))
        for _ in range(2):
            got = {n: Timing((self.remeasured[k["tile"]],) * 3) for n, k in items}
            got.update({a: Timing((1.0,) * 3) for a in anchors})
            cmp.rounds.append(got)
            cmp.order.append(list(got))
        return cmp


def _result(records, default) -> TuneResult:
    res = TuneResult(WL, "cuda -arch=sm_90a", "model", 100, None, records=records,
                     default=default, flops=2.0 * 64**3)
    res.best = min((r for r in records if r.ok), key=lambda r: r.cost)
    return res


def test_finalists_are_the_fastest_distinct_configs_and_the_default():
    d = _rec(0, 1.00)
    recs = [d, _rec(1, 0.90), _rec(2, 0.95), _rec(1, 0.91), _rec(3, 0.5, "runtime_error"),
            _rec(4, 0.97), _rec(5, 0.99)]
    assert [r.config["tile"] for r in finalists(recs, d, 3)] == [1, 2, 4, 0]
    assert [r.config["tile"] for r in finalists(recs, d, 5)] == [1, 2, 4, 5, 0]
    assert [r.config["tile"] for r in finalists(recs, None, 2)] == [1, 2]
    assert [r.config["tile"] for r in finalists([d], d, 3)] == [0]


def test_the_remeasure_keeps_the_default_a_noisy_search_ranked_below(tmp_path):
    # searched: the default at 1.00 s (a first trial on cold clocks), two configs at 0.90
    # and 0.95; re-measured alternately: the default is the fastest
    d = _rec(0, 1.00)
    res = _result([d, _rec(1, 0.90), _rec(2, 0.95)], d)
    m = _Measurer({0: 0.80, 1: 0.85, 2: 0.99})
    log = tmp_path / "r.jsonl"
    with RecordWriter(log) as w:
        _compare_best(res, m, ("torch-cuda",), 2, w, top=3)
    assert m.asked == [("top0", 1), ("top1", 2), ("default", 0)]
    assert res.best is d
    cmp = res.comparison
    assert cmp.names == ["best"] and cmp.timing("best").median == 0.80
    assert cmp.timing("default") is None and cmp.ratio("torch-cuda") == 1.0 / 0.80
    assert [(r.config["tile"], t.median) for r, t in res.finalists] == [
        (1, 0.85), (2, 0.99), (0, 0.80)]
    (summ,) = read_records(log, summaries=True)
    assert summ.phase == "summary" and summ.config == {"tile": 0}
    assert [f["remeasured"] for f in summ.summary["finalists"]] == [0.85, 0.99, 0.80]
    assert set(summ.summary["timings"]) == {"best", "torch-cuda"}


def test_the_remeasure_confirms_a_faster_config_beside_the_default():
    d = _rec(0, 1.00)
    res = _result([d, _rec(1, 0.90), _rec(2, 0.95)], d)
    _compare_best(res, _Measurer({0: 1.0, 1: 0.93, 2: 0.92}), ("torch-cuda",), 2, None,
                  top=2)
    assert res.best.config == {"tile": 2}
    cmp = res.comparison
    assert cmp.names == ["best", "default"] and cmp.timing("best").median == 0.92
    assert cmp.timing("default").median == 1.0
    assert all(set(o) == {"best", "default", "torch-cuda"} for o in cmp.order)
    # top=1: the search's best and the default only, as before the re-measure
    res = _result([d, _rec(1, 0.90), _rec(2, 0.95)], d)
    m = _Measurer({0: 1.0, 1: 0.93, 2: 0.92})
    _compare_best(res, m, (), 2, None, top=1)
    assert m.asked == [("top0", 1), ("default", 0)] and res.best.config == {"tile": 1}


def test_dispatch_and_records_best_follow_the_remeasure(tmp_path):
    # the search ranked tile 1 first (0.90 s), the final re-measure picked the default
    import polytile.autotune.records as records
    from polytile.autotune.dispatch import load_best

    d = _rec(0, 1.00)
    res = _result([d, _rec(1, 0.90)], d)
    log = tmp_path / "r.jsonl"
    with RecordWriter(log) as w:
        for r in res.records:
            w.write(r)
        _compare_best(res, _Measurer({0: 0.80, 1: 0.85}), (), 2, w, top=3)
    best = records.best_records(read_records(log, summaries=True))
    (rec,) = best.values()
    assert rec.phase == "summary" and rec.config == {"tile": 0}
    dev = {"arch": "sm_90a"}
    assert load_best(str(log), WL, "cuda -arch=sm_90a", dev).config == {"tile": 0}
    # trials after the summary (a resumed run without a comparison): the fastest trial
    with RecordWriter(log) as w:
        w.write(_rec(2, 0.95))
    assert load_best(str(log), WL, "cuda -arch=sm_90a", dev).config == {"tile": 1}
    assert records.best_records(read_records(log))[next(iter(best))].config == {"tile": 1}


def test_a_finalist_within_the_margin_of_the_default_does_not_replace_it():
    d = _rec(0, 1.00)
    res = _result([d, _rec(1, 0.90), _rec(2, 0.95)], d)
    # 0.995 s against the default's 1.0 s: within FINAL_MARGIN (1 %), the default stays
    _compare_best(res, _Measurer({0: 1.0, 1: 0.995, 2: 0.999}), (), 2, None, top=3)
    assert res.best is d and res.comparison.names == ["best"]
    res = _result([d, _rec(1, 0.90)], d)
    _compare_best(res, _Measurer({0: 1.0, 1: 0.985}), (), 2, None, top=3)
    assert res.best.config == {"tile": 1}
