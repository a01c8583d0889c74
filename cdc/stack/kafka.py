"""Apache Kafka (KRaft, one node) and a Kafka Connect worker in distributed mode, both
from the jars `make setup` fetched, with the Debezium plugins on Connect's plugin path."""
from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path

import requests
from confluent_kafka.admin import AdminClient

from cdc.errors import StackError
from cdc.stack.process import Process, java, port_accepts, require_free_port

TEMPLATES = Path(__file__).parent / "templates"
POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"


def jars_dir(cache: Path, part: str) -> Path:
    d = cache / part
    if not d.is_dir() or not any(d.iterdir()):
        raise StackError(f"the JVM jars are missing from {d}", hint="run `make setup` to fetch them from Maven Central")
    return d


class Kafka:
    def __init__(self, state_dir: Path, cache: Path, port: int, controller_port: int, heap: str, timeout_s: int,
                 max_record_bytes: int):
        self.dir = state_dir / "kafka"
        self.max_record_bytes = max_record_bytes
        self.cache = cache
        self.port = port
        self.controller_port = controller_port
        self.heap = heap
        self.timeout_s = timeout_s
        self.process = Process("kafka", state_dir / "run")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        if not port_accepts(self.port):
            return False
        try:
            AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 2000,
                         "log_level": 0}).list_topics(timeout=2)
            return True
        except Exception:  # noqa: BLE001 - any failure means not ready yet
            return False

    def _java(self, main: str, *args: str) -> list[str]:
        return [java(), f"-Xmx{self.heap}", f"-Xms{self.heap}", "-XX:+UseG1GC",
                f"-Dlog4j2.configurationFile={TEMPLATES / 'log4j2.properties'}",
                "-cp", str(jars_dir(self.cache, "kafka") / "*"), main, *args]

    def start(self) -> None:
        if self.process.pid() is not None:  # running already, or still starting
            self.process.wait_healthy(self.healthy, self.timeout_s)
            return
        require_free_port(self.port, "Kafka", "kafka_port")
        require_free_port(self.controller_port, "Kafka's controller", "kafka_controller_port")
        data = self.dir / "data"
        props = self.dir / "server.properties"
        self.dir.mkdir(parents=True, exist_ok=True)
        props.write_text((TEMPLATES / "kafka-server.properties").read_text().format(
            port=self.port, controller_port=self.controller_port, data_dir=data,
            max_record_bytes=self.max_record_bytes))
        if not (data / "meta.properties").exists():
            cluster_id = "-"
            while cluster_id.startswith("-"):  # as Kafka's own ids: one with a leading dash reads as an option
                cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            out = subprocess.run(self._java("kafka.tools.StorageTool", "format", "--standalone",
                                            "-t", cluster_id, "-c", str(props)), capture_output=True, text=True)
            if out.returncode != 0:
                raise StackError(f"formatting Kafka's storage failed (exit {out.returncode}):\n"
                                 f"{out.stdout[-1500:]}{out.stderr[-1500:]}")
        self.process.start(self._java("kafka.Kafka", str(props)))
        self.process.wait_healthy(self.healthy, self.timeout_s)


class Connect:
    def __init__(self, state_dir: Path, cache: Path, worker_template: Path, port: int, bootstrap: str,
                 heap: str, timeout_s: int):
        self.dir = state_dir / "connect"
        self.cache = cache
        self.worker_template = worker_template
        self.port = port
        self.bootstrap = bootstrap
        self.heap = heap
        self.timeout_s = timeout_s
        self.process = Process("connect", state_dir / "run")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        try:
            r = requests.get(f"{self.url}/connector-plugins", timeout=2)
            return r.ok and any(p.get("class") == POSTGRES_CONNECTOR for p in r.json())
        except (requests.RequestException, ValueError):
            return False

    def start(self) -> None:
        if self.process.pid() is not None:  # running already, or still starting
            self.process.wait_healthy(self.healthy, self.timeout_s)
            return
        require_free_port(self.port, "Kafka Connect", "connect_port")
        self.dir.mkdir(parents=True, exist_ok=True)
        worker = self.dir / "worker.properties"
        worker.write_text(self.worker_template.read_text().format(
            bootstrap=self.bootstrap, port=self.port, plugin_path=jars_dir(self.cache, "connect-plugins")))
        self.process.start([java(), f"-Xmx{self.heap}", f"-Xms{self.heap}", "-XX:+UseG1GC",
                            f"-Dlog4j2.configurationFile={TEMPLATES / 'log4j2.properties'}",
                            "-cp", str(jars_dir(self.cache, "kafka") / "*"),
                            "org.apache.kafka.connect.cli.ConnectDistributed", str(worker)])
        self.process.wait_healthy(self.healthy, self.timeout_s)
