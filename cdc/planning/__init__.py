"""Planning a micro-batch: positions that order changes, dedupe per key, the MERGE
statement; and what a bootstrap records."""
