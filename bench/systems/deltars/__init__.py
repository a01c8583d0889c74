"""The delta-rs peer (runs in its own virtualenv, .cache/peers/deltars/)."""
