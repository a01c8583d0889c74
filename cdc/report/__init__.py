"""What users read about their tables: status (lag, positions, job state), doctor,
reconciliation."""
