"""The peer-systems benchmark's figures: cdc is compared with every peer of the same topic shape."""
from __future__ import annotations

from bench.systems.__main__ import figures
from bench.systems.peers import Run

SIZES = {"events": 200_000, "keys": 50_000}
CHECK = {"correct": True, "wrong": ""}


def test_a_run_of_cdc_alone_is_compared_with_the_peers_recorded_on_the_same_topic_shape():
    previous = {"systems_sizes": SIZES, "peer_deltars_events_per_s": 20_000, "peer_deltars_job_events_per_s": 19_000,
                "peer_flink_iceberg_full_identity_events_per_s": 25_000, "peer_hudi_events_per_s": 5_000,
                "cdc_vs_deltars_events_per_s": 0.1}
    cdc = Run("cdc", 200_000, 22.0, 2.0, CHECK, {})  # 10,000 events/s after start-up
    out = figures([cdc, Run("hudi", 200_000, 44.0, 4.0, CHECK, {})], previous, SIZES, {})
    assert {k: v for k, v in out.items() if k.startswith("cdc_vs_")} == {
        "cdc_vs_hudi_events_per_s": 2.0, "cdc_vs_deltars_events_per_s": 0.5}
    full = figures([Run("cdc_full_identity", 200_000, 22.0, 2.0, CHECK, {})], previous, SIZES, {})
    assert {k: v for k, v in full.items() if k.startswith("cdc_vs_")} == {
        "cdc_vs_flink_iceberg_full_identity_events_per_s": 0.4}
    other = figures([cdc], previous, {"events": 20_000, "keys": 5_000}, {})  # another workload: none
    assert not [k for k in other if k.startswith("cdc_vs_")]
