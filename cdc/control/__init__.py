"""Commit bookkeeping: what a batch commits, and what the table already holds."""
