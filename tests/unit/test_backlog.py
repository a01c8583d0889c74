"""How a job sizes its batches and tells how far it is from catching up (jobs/backlog.py)."""


def test_batch_sizing_caps_a_backlog_and_waits_for_a_minimum_only_when_continuous():
    from cdc.config.models import TableOptions
    from cdc.jobs.backlog import batch_sizing

    assert batch_sizing(TableOptions(), available_now=False) == {}
    assert batch_sizing(TableOptions(), available_now=True, auto_cap=70_000) == {"maxOffsetsPerTrigger": "70000"}
    opts = TableOptions(max_offsets_per_trigger=50_000, min_offsets_per_trigger=2_000, max_trigger_delay_s=10)
    assert batch_sizing(opts, available_now=False, auto_cap=70_000) == {
        "maxOffsetsPerTrigger": "50000", "minOffsetsPerTrigger": "2000", "maxTriggerDelay": "10s"}
    assert batch_sizing(opts, available_now=True) == {"maxOffsetsPerTrigger": "50000"}


def test_an_automatic_cap_keeps_the_batches_under_way_within_a_share_of_the_memory():
    from cdc.jobs.backlog import AUTO_MAX_RECORDS, AUTO_MIN_RECORDS, AUTO_UNKNOWN_RECORDS, auto_batch_cap

    gib = 1 << 30
    assert auto_batch_cap(2 * gib, 2048, batches=1) == 524_288  # half of 2 GiB in 2 KiB records
    assert auto_batch_cap(2 * gib, 2048, batches=4) == 131_072  # four batches under way at once share it
    assert auto_batch_cap(2 * gib, 2048, batches=100) == AUTO_MIN_RECORDS  # never below the floor
    assert auto_batch_cap(64 * gib, 100, batches=1) == AUTO_MAX_RECORDS  # nor above the ceiling
    assert auto_batch_cap(2 * gib, None, batches=1) == AUTO_UNKNOWN_RECORDS  # an empty topic


def test_catching_up_tells_the_rate_and_the_time_left(capsys):
    from cdc.jobs.backlog import BEHIND_RECORDS, PROGRESS_EVERY_S, CatchUp

    now = [0.0]
    c = CatchUp("s.a", clock=lambda: now[0])
    assert c.line(5_000_000, 100) == "catching up: 5,000,000 record(s) left"
    now[0] = 100.0  # 400,000 applied while 100,000 arrived: the backlog shrinks by 3,000/s
    assert c.line(4_700_000, 400_100) == ("catching up: 4,700,000 record(s) left, 4,000 records/s, "
                                         "about 26 min left")
    now[0] = 200.0  # nothing applied since, and more arrived than it had gained
    assert c.line(5_100_000, 400_100).endswith("2,000 records/s, not gaining on the source")

    watched, seen = CatchUp("s.b", clock=lambda: now[0]), []
    watched.line = lambda left, applied: seen.append(left)  # noqa: E731 - records the lines logged
    watched.seen(BEHIND_RECORDS - 1, 0)  # not behind: nothing
    watched.seen(BEHIND_RECORDS * 5, 0)
    now[0] += 1
    watched.seen(BEHIND_RECORDS * 4, 10_000)  # within PROGRESS_EVERY_S of the last line
    now[0] += PROGRESS_EVERY_S
    watched.seen(BEHIND_RECORDS * 3, 20_000)
    assert seen == [BEHIND_RECORDS * 5, BEHIND_RECORDS * 3]
    watched.seen(0, 50_000)
    assert "s.b: caught up" in capsys.readouterr().err and watched.shown_at is None
