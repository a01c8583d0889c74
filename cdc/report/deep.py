"""`cdc reconcile --deep`: checksums of ranges of the key on both sides, bisected down to
the keys that differ.

Both sides are read by Spark: the source through the JDBC reader inside the snapshot the
row count was taken in, converted exactly as a JDBC bootstrap converts it (so values are
in the target's types), the target at the snapshot that was counted. Every row gets a
hash of its columns, every key a 64-bit hash. The key hashes are cut into 16 ranges; the
ranges whose row count or checksum differ are cut into 16 again, and so on while many
rows are left in them; then the rows of the differing ranges are matched key by key:
missing in the target, extra in the target, duplicate (a key more than once on a side),
or different. Each level is one aggregation
(no loop over keys, no rows on the driver but the keys listed in the report).
"""
from __future__ import annotations

import datetime as dt
import decimal
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc.planning.drift import DIFFERENT, DUPLICATE, EXTRA, MISSING
from cdc.planning.sql import q

FANOUT_BITS = 4  # each level cuts a range into 16
LEAF_ROWS = 4096  # compare key by key once the differing ranges hold no more rows than this
MAX_RANGES = 4096  # or once this many ranges differ (the differences are everywhere)
KEY_HASH, ROW_HASH = "_cdc_key_hash", "_cdc_row_hash"


@dataclass
class Bisection:
    """Which ranges of the key hash to look at next. No Spark here.

    At level n a range is the top 4n bits of the key hash; `prefixes` are the ranges of the
    previous level that differed (None at level 1: everything)."""

    level: int = 0
    prefixes: list[int] | None = None
    steps: list[dict] = field(default_factory=list)

    @property
    def shift(self) -> int:
        """Right shift of the key hash that gives the current level's range."""
        return 64 - FANOUT_BITS * self.level

    def descend(self) -> "Bisection":
        self.level += 1
        return self

    def found(self, differing: list[tuple[int, int]]) -> bool:
        """Record this level's differing (range, rows); True when it is time to compare keys."""
        self.steps.append({"level": self.level, "ranges": 16 ** self.level if self.prefixes is None
                           else len(self.prefixes) * 16, "differing": len(differing),
                           "rows": sum(rows for _, rows in differing)})
        self.prefixes = sorted(r for r, _ in differing)
        return (not differing or sum(rows for _, rows in differing) <= LEAF_ROWS
                or len(differing) >= MAX_RANGES or self.shift == 0)


def hashed(df: DataFrame, columns: tuple[str, ...], key: tuple[str, ...]) -> DataFrame:
    """The key columns, the key's hash and a hash of the whole row (nulls told apart from
    values moved to another column by a mask of which columns are null)."""
    nulls = F.concat(*[F.when(F.col(q(c)).isNull(), F.lit("1")).otherwise(F.lit("0")) for c in columns])
    return df.select(*[F.col(q(k)) for k in key], F.xxhash64(*[F.col(q(k)) for k in key]).alias(KEY_HASH),
                     F.xxhash64(*[F.col(q(c)) for c in columns], nulls).alias(ROW_HASH))


def _range(shift: int):
    return F.shiftrightunsigned(F.col(KEY_HASH), shift)


def _in_prefixes(b: Bisection):
    if b.prefixes is None:
        return F.lit(True)
    return _range(b.shift + FANOUT_BITS).isin(b.prefixes)


def _checksums(df: DataFrame, b: Bisection) -> DataFrame:
    return (df.where(_in_prefixes(b)).groupBy(_range(b.shift).alias("_range"))
            .agg(F.count(F.lit(1)).alias("rows"), F.bit_xor(ROW_HASH).alias("xor"),
                 F.sum(F.col(ROW_HASH).bitwiseAND(F.lit(0x7FFFFFFF))).alias("sum")))


def compare(source: DataFrame, target: DataFrame, columns: tuple[str, ...], key: tuple[str, ...],
            limit: int) -> dict:
    """Differences between two frames with the same columns, by key: counts per kind and up
    to `limit` keys, with the bisection's levels."""
    src = hashed(source, columns, key).persist(StorageLevel.MEMORY_AND_DISK)
    tgt = hashed(target, columns, key).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        b = Bisection()
        totals = None
        while True:
            b.descend()
            s, t = _checksums(src, b).alias("s"), _checksums(tgt, b).alias("t")
            joined = s.join(t, "_range", "full_outer")
            if totals is None:  # level 1 covers every row: the sides' sizes come with it
                agg = joined.agg(F.sum("s.rows").alias("s"), F.sum("t.rows").alias("t")).first()
                totals = {"source": int(agg["s"] or 0), "target": int(agg["t"] or 0)}
            same = (F.col("s.rows").eqNullSafe(F.col("t.rows")) & F.col("s.xor").eqNullSafe(F.col("t.xor"))
                    & F.col("s.sum").eqNullSafe(F.col("t.sum")))
            differing = joined.where(~same).select(
                "_range", F.greatest(F.coalesce("s.rows", F.lit(0)), F.coalesce("t.rows", F.lit(0))).alias("n"))
            if b.found([(r["_range"], r["n"]) for r in differing.collect()]):
                break
        result = {"rows": totals, "levels": b.steps, MISSING: 0, EXTRA: 0, DIFFERENT: 0, DUPLICATE: 0, "keys": [],
                  "limit": limit}
        if not b.prefixes:
            return result
        leaf = _range(b.shift).isin(b.prefixes)
        def per_key(df: DataFrame, side: str) -> DataFrame:  # a key twice on one side is a difference too
            return df.where(leaf).groupBy(*[q(k) for k in key]).agg(
                F.count(F.lit(1)).alias(f"_{side}n"), F.min(ROW_HASH).alias(f"_{side}lo"),
                F.max(ROW_HASH).alias(f"_{side}hi"))

        s, t = per_key(src, "s"), per_key(tgt, "t")
        kind = (F.when(F.col("_tn").isNull(), F.lit(MISSING)).when(F.col("_sn").isNull(), F.lit(EXTRA))
                .when((F.col("_sn") > 1) | (F.col("_tn") > 1), F.lit(DUPLICATE))
                .when((F.col("_slo") != F.col("_tlo")) | (F.col("_shi") != F.col("_thi")), F.lit(DIFFERENT)))
        diffs = s.join(t, list(key), "full_outer").select(*[q(k) for k in key], kind.alias("_kind")) \
            .where(F.col("_kind").isNotNull()).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            for r in diffs.groupBy("_kind").count().collect():
                result[r["_kind"]] = int(r["count"])
            listed = diffs.orderBy("_kind", *[q(k) for k in key]).limit(limit).collect()
            result["keys"] = [{"kind": r["_kind"], "key": {k: _plain(r[k]) for k in key}} for r in listed]
        finally:
            diffs.unpersist()
        return result
    finally:
        src.unpersist()
        tgt.unpersist()


def _plain(value):
    """A key value as JSON can carry it."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (decimal.Decimal, dt.date, dt.datetime)):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return str(value)
