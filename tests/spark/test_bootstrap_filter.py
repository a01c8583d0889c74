"""The bootstrap's held-change check as Spark SQL agrees with its pure definition."""
import random

from cdc.planning.bootstrap import Bootstrap, Chunk, SourceSnapshot, DONE
from cdc.planning.position import encode


def test_held_sql_matches_the_pure_rule_across_xid_wraparound(spark):
    rng = random.Random(7)
    snapshots = [SourceSnapshot(5000, 100, 120, (104, 117)),
                 SourceSnapshot(9000, (1 << 32) - 6, 4, ((1 << 32) - 3, 1))]
    boot = Bootstrap("b", "jdbc", DONE, {0: 0}, key_column="id", chunks=[Chunk(None, 50), Chunk(50, None)],
                     snapshots={0: snapshots[0], 1: snapshots[1]})
    rows = []
    for _ in range(3000):
        key = rng.randrange(0, 100)
        snap = snapshots[0] if key < 50 else snapshots[1]
        txid = rng.choice([rng.randrange(0, 1 << 32), (snap.xmin + rng.randrange(-30, 30)) % (1 << 32)])
        commit = rng.choice([rng.randrange(0, 20000), snap.lsn, snap.lsn + 1])
        rows.append((key, txid, encode(commit, rng.randrange(0, 1 << 40), 1, 0, rng.randrange(0, 1000)),
                     snap.sees(txid, commit)))
    rows.append((7, None, encode(1, 1, 1, 0, 0), False))  # a tombstone carries no transaction
    df = spark.createDataFrame(rows, "id INT, _txid BIGINT, _position STRING, expected BOOLEAN")
    wrong = df.where(f"coalesce({boot.held_sql()}, FALSE) != expected").count()
    assert wrong == 0
    assert df.where("expected").count() > 300 and df.where("NOT expected").count() > 300
