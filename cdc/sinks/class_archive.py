"""The driver JVM's class archive (the JDK's class data sharing, CDS): the classes a cdc
process loads (Spark's, Iceberg's, Delta's, Kafka's), parsed and verified once and mapped
into every later driver JVM instead of loaded again from the jars, which is most of a
session's start-up. `make setup` builds it (sinks/archive_classes.py); a session started
by cdc itself (not by spark-submit) on a local master uses it (`java_options`). It belongs
to one JDK and one set of jars: its name carries their fingerprint, so after a change of
either no archive is found until `make setup` builds one, and the JVM itself ignores one
that does not match, silently."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from cdc.config.models import Settings

# No line of the JVM's own about the archive (it writes them to standard output, which
# carries a command's JSON): a missing or mismatched archive only means a slower start.
QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


def fingerprint(jars: list[str]) -> str:
    """What an archive depends on: the JDK (its `java` binary) and each jar (path, size, time)."""
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if "JAVA_HOME" in os.environ \
        else shutil.which("java")
    parts = [os.path.realpath(java) if java else "no java"]
    for path in [parts[0], *jars]:
        try:
            stat = os.stat(path)
            parts.append(f"{path}:{stat.st_size}:{int(stat.st_mtime)}")
        except OSError:
            parts.append(f"{path}:missing")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path(settings: Settings, jars: list[str]) -> Path:
    return settings.path(settings.jars_dir) / f"cdc-classes-{fingerprint(jars)}.jsa"


def java_options(settings: Settings, jars: list[str]) -> str:
    """The driver's options to map the archive in ("" when there is none for these jars)."""
    path = archive_path(settings, jars)
    return f'"-XX:SharedArchiveFile={path}" {QUIET}' if path.is_file() else ""
