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


def test_a_run_of_a_peer_alone_is_compared_with_cdc_recorded_on_the_same_workload():
    previous = {"systems_sizes": SIZES, "systems_cdc_events_per_s": 10_000, "apply_events_per_s": 30_000,
                "systems_cdc_full_identity_events_per_s": 12_000}
    peer = Run("iceberg_connect", 200_000, 44.0, 4.0, CHECK, {})  # 5,000 events/s after start-up
    full = Run("flink_iceberg_full_identity", 200_000, 14.0, 4.0, CHECK, {})  # 20,000
    out = figures([peer, full], previous, SIZES, {})
    assert out["cdc_vs_iceberg_connect_events_per_s"] == 2.0
    assert out["cdc_vs_flink_iceberg_full_identity_events_per_s"] == 0.6
    other = figures([peer], previous, {"events": 20_000, "keys": 5_000}, {})  # another workload: the apply section's
    assert other["cdc_vs_iceberg_connect_events_per_s"] == 6.0


def test_the_merge_workload_is_compared_with_merge_runs_alone():
    previous = {"systems_merge_sizes": SIZES, "peer_hudi_merge_events_per_s": 4_000,
                "peer_flink_paimon_full_identity_events_per_s": 1_000, "peer_deltars_events_per_s": 1_000}
    cdc = Run("cdc_merge", 200_000, 22.0, 2.0, CHECK, {})  # 10,000 events/s after start-up
    out = figures([cdc, Run("flink_iceberg_merge", 200_000, 14.0, 4.0, CHECK, {})], previous, SIZES, {}, merge=True)
    assert {k: v for k, v in out.items() if k.startswith("cdc_vs_")} == {
        "cdc_vs_flink_iceberg_merge_events_per_s": 0.5, "cdc_vs_hudi_merge_events_per_s": 2.5}
    assert "systems_merge_sizes" in out and "systems_sizes" not in out
    alone = figures([Run("deltars_merge", 200_000, 11.0, 1.0, CHECK, {})],
                    {**previous, "systems_cdc_merge_events_per_s": 30_000, "systems_cdc_events_per_s": 1}, SIZES, {},
                    merge=True)
    assert alone["cdc_vs_deltars_merge_events_per_s"] == 1.5


def test_the_merge_workload_starts_from_a_table_holding_every_key():
    from bench.systems import workload

    loaded = list(workload.load(1_000))
    changes = list(workload.changes(1_000, 2_000, seed=3, loaded=True))
    first = {}
    for c in changes:
        first.setdefault(c.id, c.op)
    assert set(first.values()) <= {"u", "d"}  # no key's first change is an insert: the table holds it
    truth = workload.truth(loaded + changes)
    untouched = set(range(1_000)) - set(first)
    assert untouched and all(truth[k] == ("initial", workload.n_of(k)) for k in untouched)
    assert workload.stats(changes)["reinserts"] == workload.stats(changes)["inserts"] > 0


def test_freshness_compares_cdc_default_with_the_peers_defaults_and_its_fastest_with_their_fastest():
    from bench.systems.live import Live, figures as live_figures

    def run(name: str, seconds: float) -> Live:  # a p95 of `seconds`
        return Live(name, [seconds / 2] * 90 + [seconds] * 10, 2_000.0, CHECK)

    out = live_figures([run("cdc", 4.0), run("cdc_trigger_0_5s", 2.0), run("flink_iceberg", 16.0),
                        run("flink_iceberg_checkpoint_1s", 4.0), run("hudi", 1.0)])
    assert {k: v for k, v in out.items() if k.startswith("cdc_vs_")} == {
        "cdc_vs_flink_iceberg_freshness_p95": 0.25, "cdc_vs_flink_iceberg_checkpoint_1s_freshness_p95": 0.5,
        "cdc_vs_hudi_freshness_p95": 2.0}
    assert out["systems_cdc_freshness_p95_s"] == 4.0 and out["peer_hudi_freshness_p50_s"] == 0.5
    assert out["peer_hudi_freshness_correct"] is True
    # cdc run again alone: compared with the peers recorded before
    again = live_figures([run("cdc", 8.0)], out)
    assert {k: v for k, v in again.items() if k.startswith("cdc_vs_")} == {
        "cdc_vs_flink_iceberg_freshness_p95": 0.5, "cdc_vs_flink_iceberg_checkpoint_1s_freshness_p95": 0.5,
        "cdc_vs_hudi_freshness_p95": 2.0}


def test_a_peer_that_fails_is_a_result_and_cdc_failing_fails_the_run():
    from bench.systems.__main__ import exit_code

    assert exit_code({}) == 0
    assert exit_code({"flink_iceberg": "PeerError: ...", "flink_paimon_full_identity": "..."}) == 0
    assert exit_code({"cdc_merge": "RuntimeError: ..."}) == 1
