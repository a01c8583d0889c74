from cdc.jobs.maintenance import expire_before

HOUR = 3_600_000


def test_expiry_never_passes_the_newest_snapshot_with_offsets():
    now = 100 * HOUR
    # a compaction after the last batch carries no offsets: the batch's snapshot stays
    assert expire_before([(10 * HOUR, True), (90 * HOUR, True), (99 * HOUR, False)], 24, now) == 76 * HOUR
    assert expire_before([(10 * HOUR, True), (50 * HOUR, True), (99 * HOUR, False)], 24, now) == 50 * HOUR
    assert expire_before([(99 * HOUR, False)], 24, now) == 76 * HOUR  # no offsets at all: the retention alone
