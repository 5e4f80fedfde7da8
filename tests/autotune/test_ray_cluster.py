"""Tuning on a Ray cluster of two nodes simulated on this machine
(``ray.cluster_utils.Cluster``): one measuring actor per node, trials/s per node, and a
node that vanishes mid-run (its trials recorded failed and measured once more on the other
node, the log intact). Skipped without Ray (CI installs it: ``.ci/run``)."""

from __future__ import annotations

import warnings

import pytest

from polytile.autotune import MeasureOptions, read_records, tune
from polytile.autotune.records import RecordWarning

ARGS = (48, 40, 56)
OPT = MeasureOptions(parallel=1, threads=1, number=1, repeat=2, min_repeat_ms=2,
                     budget_s=0.02)


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'polytile[ray]' "
                        "(CI installs it)")
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                                                       "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


def test_a_vanished_node_loses_only_its_trials(cluster, tmp_path):
    import ray

    log = tmp_path / "cluster.jsonl"
    gone = []
    head_id = cluster.head_node.node_id

    def remove_worker_node(res, rec):
        if res.n_trials == 3 and not gone:
            (node,) = cluster.worker_nodes
            gone.append(node.node_id)
            cluster.remove_node(node)

    res = tune("matmul", ARGS, tuner="random", n_trial=14, measure_option=OPT,
               log_file=str(log), seed=11, batch_size=12, callbacks=[remove_worker_node],
               ray="auto")
    assert gone and ray.is_initialized()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecordWarning)
        recs = read_records(log)
    assert len(recs) == res.n_trials >= 14
    lost = [r for r in recs if r.error_msg.startswith("lost:")]
    assert lost and all(r.error_msg.endswith("queued again") for r in lost)
    for r in lost:
        later = [q for q in recs if q.config_index == r.config_index and q.line > r.line]
        assert len(later) == 1 and later[0].ok
    nodes = {n["node_id"]: n for n in res.nodes}
    assert set(nodes) == {head_id, gone[0]}  # both measured, the survivor went on
    assert nodes[gone[0]]["trials"] >= 1 and nodes[head_id]["trials"] > nodes[gone[0]]["trials"]
    assert sum(n["trials"] for n in nodes.values()) == res.n_trials
