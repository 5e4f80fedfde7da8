"""The recorded replay pools of ``benchmarks/pools`` still describe their templates.

A pool (:mod:`polytile.autotune.replay`) keeps configs with the costs and loop-IR features
they had when it was measured. When a template's knobs change, its configs may fall out of
the space (the oracle would drop them) and when its schedule or the lowering changes, the
same config builds another loop nest: the pool's costs and features then describe kernels
the template no longer builds (the softmax pool after the row templates got the next-row
prefetch and the tree combine: 70 of its 192 configs lowered to other features). These
tests make such a pool fail CI instead of silently skewing the search-quality figures;
the remedy is measuring it again (``benchmarks/search_quality.py --remeasure``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from polytile.autotune.replay import Pool

POOLS = Path(__file__).resolve().parents[2] / "benchmarks" / "pools"
ALL = sorted(p.name for p in POOLS.glob("*.json"))
CPU = [n for n in ALL if "_llvm_" in n]
#: Entries (with features) per CPU pool lowered again, spread over the pool: 1-3 s per pool
#: on a loaded 2-core machine; a change that alters a third of the configs (the row
#: templates' prefetch on the softmax pool) is missed with probability 0.67^12 < 1 %.
SAMPLE = 12


def test_the_cpu_pools_are_there():
    assert {n.split("_")[0] for n in CPU} >= {"matmul", "conv2d", "softmax"}, CPU


@pytest.mark.parametrize("name", ALL)
def test_pool_configs_are_in_the_current_space(name):
    """Every config of the pool is a config of its template's space now, each once."""
    pool = Pool.load(str(POOLS / name))
    space = pool.space()
    seen = set()
    for e in pool.entries:
        i = space.from_json(e["config"]).index   # TuneError for a knob or value gone
        assert i not in seen, f"{name}: config {e['config']} twice"
        seen.add(i)
    assert seen


@pytest.mark.parametrize("name", CPU)
def test_cpu_pool_is_what_the_template_builds_now(name):
    """A CPU pool was drawn from the template's current space (same size) and a sample of
    its configs lowers to the loop-IR features stored with their costs (stored rounded
    to 4 significant digits)."""
    from polytile.autotune.template import get_template
    from polytile.autotune.transfer import config_features

    pool = Pool.load(str(POOLS / name))
    assert len(pool.space()) == pool.space_size, (
        f"{name}: the space has {len(pool.space()):,} configs, the pool was drawn from "
        f"{pool.space_size:,}: measure it again")
    ok = [e for e in pool.entries if e.get("features")]
    step = max(1, len(ok) // SAMPLE)
    sample = ok[::step][:SAMPLE]
    w = pool.wl
    now, _ = config_features(get_template(w.template), w.args, w.dtype, pool.target,
                             [e["config"] for e in sample])
    stale = [e["config"] for e, f in zip(sample, now)
             if f is None or not np.allclose(f, e["features"], rtol=2e-3, atol=2e-3)]
    assert not stale, f"{name}: {len(stale)} of {len(sample)} configs lower to other " \
        f"features than the pool's (measure it again): {stale[:2]}"
