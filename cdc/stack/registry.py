"""The local schema registry: Apicurio Registry (re-augmented from Maven Central by
`make setup`), its schemas kept in an H2 file under the state directory, serving the
Confluent-compatible API that cdc reads writer schemas from."""
from __future__ import annotations

from pathlib import Path

import requests

from cdc.config.models import REGISTRY_CONFLUENT_API
from cdc.errors import StackError
from cdc.stack.process import Process, java, require_free_port


class SchemaRegistry:
    def __init__(self, state_dir: Path, cache: Path, port: int, heap: str, timeout_s: int):
        self.dir = state_dir / "registry"
        self.jar = cache / "registry" / "quarkus-run.jar"
        self.port = port
        self.heap = heap
        self.timeout_s = timeout_s
        self.process = Process("registry", state_dir / "run")

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL."""
        return f"http://127.0.0.1:{self.port}{REGISTRY_CONFLUENT_API}"

    def healthy(self) -> bool:
        try:
            return requests.get(f"{self.url}/subjects", timeout=2).ok
        except requests.RequestException:
            return False

    def start(self) -> None:
        if self.process.pid() is not None:  # running already, or still starting
            self.process.wait_healthy(self.healthy, self.timeout_s)
            return
        if not self.jar.exists():
            raise StackError(f"the schema registry is missing from {self.jar.parent}",
                             hint="run `make setup` to build it from Maven Central")
        require_free_port(self.port, "the schema registry", "registry_port")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.process.start([
            java(), f"-Xmx{self.heap}", "-XX:+UseSerialGC",
            "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={self.port}",
            f"-Dquarkus.datasource.jdbc.url=jdbc:h2:file:{self.dir / 'schemas'}",
            "-Dquarkus.datasource.jdbc.min-size=1", "-Dquarkus.datasource.jdbc.initial-size=1",
            "-Dquarkus.log.level=WARN", "-jar", str(self.jar)], cwd=self.dir)
        self.process.wait_healthy(self.healthy, self.timeout_s)
