"""Each peer run as a subprocess of its own virtualenv (.cache/peers/<name>/venv, made by
setup.sh), and what it reports: its times, and its result table checked against the truth."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from bench.systems.check import compare

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PEERS = ("deltars", "hudi", "hudi_precreated", "flink_iceberg", "flink_paimon", "flink_iceberg_ignore_errors",
         "flink_paimon_ignore_errors", "flink_iceberg_no_materialize", "iceberg_connect", "iceberg_connect_commit_1s")
# a peer run as another's job with extra arguments
JOBS = {"hudi_precreated": ("hudi", ["--precreate"]),
        "flink_iceberg": ("flink", ["--sink", "iceberg"]), "flink_paimon": ("flink", ["--sink", "paimon"]),
        "flink_iceberg_ignore_errors": ("flink", ["--sink", "iceberg", "--ignore-parse-errors"]),
        "flink_paimon_ignore_errors": ("flink", ["--sink", "paimon", "--ignore-parse-errors"]),
        "flink_iceberg_no_materialize": ("flink", ["--sink", "iceberg", "--no-upsert-materialize"]),
        "iceberg_connect_commit_1s": ("iceberg_connect", ["--commit-interval-ms", "1000"])}


class PeerError(RuntimeError):
    """A peer that could not be set up or did not finish; the message names its log."""


@dataclass(frozen=True)
class Run:
    """One peer's run of the whole topic: seconds from process start to the table
    committed (`job_s`), the part before it was ready to read (`startup_s`), its check."""
    name: str
    events: int
    job_s: float
    startup_s: float
    check: dict
    detail: dict

    @property
    def events_per_s(self) -> float:
        """Events a second once started (process and JVM start-up excluded)."""
        return self.events / (self.job_s - self.startup_s)

    def figures(self) -> dict:
        p = f"systems_{self.name}" if self.name.startswith("cdc") else f"peer_{self.name}"
        return {f"{p}_events_per_s": round(self.events_per_s), f"{p}_job_events_per_s": round(self.events / self.job_s),
                f"{p}_job_s": round(self.job_s, 2), f"{p}_startup_s": round(self.startup_s, 2),
                f"{p}_correct": self.check["correct"], f"{p}_wrong": self.check["wrong"],
                f"{p}_check": {k: v for k, v in self.check.items() if k not in ("correct", "wrong")}}


def setup(name: str) -> Path:
    """The peer's virtualenv (and jars), made if needed; returns its python."""
    log = ROOT / ".cache" / "peers" / f"{name}-setup.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        if subprocess.run(["bash", str(HERE / "setup.sh"), name], stdout=out, stderr=subprocess.STDOUT).returncode:
            raise PeerError(f"setting up the {name} peer failed: see {log}")
    return ROOT / ".cache" / "peers" / name / "venv" / "bin" / "python"


def _env(python: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "SPARK_HOME", "VIRTUAL_ENV", "PYSPARK_SUBMIT_ARGS")}
    env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python))
    env["PATH"] = f"{python.parent}:{env.get('PATH', '')}"
    return env


def launch(cmd: list[str], python: Path, err) -> subprocess.Popen:
    """A peer's job started in a process group of its own (its JVMs with it: `stop`)."""
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=_env(python),
                            start_new_session=True)


def stop(process: subprocess.Popen) -> None:
    """The job and every process it started (a JVM, a Connect worker) killed."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def command(name: str, python: Path, settings, topic: str, end: int, work: Path, batch: int,
            table_type: str, start: int = 0) -> list[str]:
    job_name, extra = JOBS.get(name, (name, []))
    job = [str(python), str(HERE / job_name / "job.py"), "--bootstrap", settings.kafka_bootstrap, "--topic", topic,
           "--table", str(work / f"{name}_table"), "--out", str(work / f"{name}_result"), "--batch", str(batch)]
    if start:
        job += ["--start", str(start)]
    if job_name == "deltars":
        job += ["--until", str(end)]
    if job_name in ("hudi", "flink", "iceberg_connect"):
        job += ["--jars", str(ROOT / ".cache" / "peers" / job_name / "jars"), "--end", str(end)]
    if job_name == "iceberg_connect":
        job += ["--kafka-jars", str(settings.path(settings.jars_dir) / "kafka")]
    if job_name == "hudi":
        job += ["--table-type", table_type]
    return job + extra


def run(name: str, settings, topic: str, end: int, expected: dict, work: Path, batch: int = 100_000,
        table_type: str = "COPY_ON_WRITE", timeout: float = 3600, start: int = 0) -> Run:
    """The peer over `topic`'s offsets `start` to `end`, timed and checked; from 0 into a new
    table, from a later `start` into the table an earlier run left."""
    python = setup(JOBS.get(name, (name,))[0])
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"{name}.log"
    began = time.time()
    with log.open("w") as err:
        process = launch(command(name, python, settings, topic, end, work, batch, table_type, start), python, err)
        try:
            out, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop(process)
            raise PeerError(f"the {name} peer did not finish within {timeout:.0f}s: see {log}")
        done = subprocess.CompletedProcess(process.args, process.returncode, out)
    if done.returncode:
        last = next((line for line in reversed(log.read_text().splitlines()) if line.strip()), "")
        raise PeerError(f"the {name} peer exited with {done.returncode}: see {log}; its last line: {last[:500]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    result = pq.read_table(str(work / f"{name}_result"), columns=["id", "v", "n"]).to_pydict()
    check = compare(expected, zip(result["id"], result["v"], result["n"]))
    detail = {k: v for k, v in report.items() if k not in ("started", "ready", "committed", "events")}
    return Run(name, report["events"], report["committed"] - began, report["ready"] - began, check, detail)
