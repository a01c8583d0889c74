import json

import pytest

from cdc.control.checkpoint import batch_end_offsets, committed_end_offsets, checkpoint_is_stale
from cdc.errors import ApplyError


def write_batch(cp, batch_id, offsets, committed=True):
    (cp / "offsets").mkdir(parents=True, exist_ok=True)
    (cp / "commits").mkdir(parents=True, exist_ok=True)
    (cp / "offsets" / str(batch_id)).write_text("v1\n{\"batchWatermarkMs\":0}\n" + json.dumps(offsets) + "\n")
    if committed:
        (cp / "commits" / str(batch_id)).write_text("v1\n{}\n")


def test_reads_the_newest_committed_batch(tmp_path):
    write_batch(tmp_path, 0, {"t": {"0": 5}})
    write_batch(tmp_path, 1, {"t": {"0": 9}})
    write_batch(tmp_path, 2, {"t": {"0": 12}}, committed=False)
    assert committed_end_offsets(tmp_path) == {"t": {0: 9}}
    assert batch_end_offsets(tmp_path, 2) == {"t": {0: 12}}
    assert committed_end_offsets(tmp_path / "none") is None


def test_checkpoint_behind_or_missing_is_fine():
    assert not checkpoint_is_stale("a.b", "t", {0: 10}, None)
    assert not checkpoint_is_stale("a.b", "t", {0: 10}, {"t": {0: 4}})


def test_checkpoint_of_another_topic_is_stale():
    assert checkpoint_is_stale("a.b", "t", {0: 10}, {"other": {0: 4}})


def test_checkpoint_ahead_of_the_table_names_replay():
    with pytest.raises(ApplyError, match=r"(?s)partition 0: table at 10, checkpoint at 15.*cdc replay --table a.b"):
        checkpoint_is_stale("a.b", "t", {0: 10}, {"t": {0: 15}})


def test_retention_gap_names_the_missing_range():
    from cdc.control.gaps import check_offsets_available

    check_offsets_available("a.b", "t", {0: 10}, {0: (0, 12)})
    check_offsets_available("a.b", "t", {}, {0: (50, 60)})  # nothing applied yet: starts at earliest
    with pytest.raises(ApplyError, match=r"(?s)partition 0 no longer holds offsets 10..49.*cdc bootstrap --table a.b"):
        check_offsets_available("a.b", "t", {0: 10}, {0: (50, 60)})
    with pytest.raises(ApplyError, match=r"ends at offset 3.*recreated"):
        check_offsets_available("a.b", "t", {0: 10}, {0: (0, 3)})
    with pytest.raises(ApplyError, match=r"no partition 1"):
        check_offsets_available("a.b", "t", {1: 10}, {0: (0, 3)})


def test_recreated_topic_is_told_apart_by_its_id():
    from cdc.control.gaps import check_offsets_available

    check_offsets_available("a.b", "t", {0: 10}, {0: (0, 500)}, "id-1", "id-1")
    with pytest.raises(ApplyError, match=r"topic t was recreated \(topic id id-2"):
        check_offsets_available("a.b", "t", {0: 10}, {0: (0, 500)}, "id-1", "id-2")
