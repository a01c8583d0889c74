"""The Apache Hudi peer (runs in its own virtualenv, .cache/peers/hudi/)."""
