"""The `cdc` command line as a `spark-submit` application, for a Spark cluster:

    spark-submit --master spark://HOST:7077 --jars JARS cdc/jobs/submit.py \\
        --config cdc.yaml run --table shop.orders --available-now

The arguments are those of `cdc`. The master, jars and --conf given to spark-submit win
over `spark:` in cdc.yaml (cdc/sinks/session.py). The driver runs the Python code; the
executors need only the JVM jars (no Python UDF on the row path). docs/deployment.md,
"Running on a cluster", has the commands for standalone, YARN and Kubernetes."""
from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    # Python puts this script's directory first on the path, where metrics.py, shutdown.py...
    # would shadow top-level modules of the same name: the package is imported as `cdc`.
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)
    from cdc.cli.main import main

    sys.exit(main())
