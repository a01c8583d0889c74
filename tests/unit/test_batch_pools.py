"""A batch's fair-scheduler pool by its size and table: the bigger batches' pools sort first,
whatever their tables are named (tests/unit/test_checkpoint.py writes offset logs alike)."""
from __future__ import annotations

from cdc.jobs.apply import TableApplier, size_pool
from tests.unit.test_checkpoint import write_batch


def test_bigger_batches_get_pools_that_sort_first():
    pools = [size_pool(name, n) for name, n in (("z.busy", 100_000), ("m.t", 5_000), ("a.t", 64), ("a.t", 63),
                                                 ("a.t", 40), ("a.quiet", 2), ("a.quiet", 1))]
    assert pools == sorted(pools) and len(set(pools)) == 6  # a power of two each: 40 and 63 share a.t's pool
    assert size_pool("a.t", None) == size_pool("a.t", 1 << 60) == "cdc-batch-00-a.t"  # unknown counts as big


def test_a_batch_is_sized_from_the_offset_log_else_from_the_committed_offsets(tmp_path):
    applier = TableApplier("s.t", "lake.s.t", "topic", (), ("id",), job="j", deletes_ref="lake.s.t_d",
                           delete_horizon_hours=1, checkpoint=tmp_path)
    write_batch(tmp_path, 0, {"topic": {"0": 50, "1": 7}})
    write_batch(tmp_path, 1, {"topic": {"0": 80, "1": 7, "2": 4}}, committed=False)
    assert applier.planned_records(1, {0: 10}) == 30 + 0 + 4  # from batch 0's end; a new partition from 0
    assert applier.planned_records(0, {0: 10, 1: 5}) == 40 + 2  # the first batch: from the commits
    assert applier.planned_records(2, {}) is None  # not planned here
    assert applier.planned_records(0) is None  # the first batch, the commits not read: unknown


def test_a_tables_own_batch_is_read_by_the_task_over_the_offset_logs_range(tmp_path):
    """The direct path's task reads a batch of the table's own query itself over the range
    the offset log gives (the batch before it's end to its own; a new partition from its
    first record); a first batch, a batch the log does not hold, or offsets gone back read
    through the query."""
    reads = []
    applier = TableApplier("s.t", "lake.s.t", "topic", (), ("id",), job="j", deletes_ref="lake.s.t_d",
                           delete_horizon_hours=1, checkpoint=tmp_path,
                           kafka_records=lambda ranges: reads.append(ranges) or ranges)
    write_batch(tmp_path, 0, {"topic": {"0": 50, "1": 7}})
    write_batch(tmp_path, 1, {"topic": {"0": 80, "1": 7, "2": 4}}, committed=False)
    assert applier._own_read(1) == {"topic": ({0: 50, 1: 7}, {0: 80, 1: 7, 2: 4})}
    assert applier._own_read(0) is None and applier._own_read(2) is None
    write_batch(tmp_path, 2, {"topic": {"0": 60, "1": 7, "2": 4}}, committed=False)  # the topic made anew
    assert applier._own_read(2) is None
    assert reads == [{"topic": ({0: 50, 1: 7}, {0: 80, 1: 7, 2: 4})}]
    assert TableApplier("s.t", "lake.s.t", "topic", (), ("id",), job="j", deletes_ref="lake.s.t_d",
                        delete_horizon_hours=1, checkpoint=tmp_path)._own_read(1) is None  # no reader given
