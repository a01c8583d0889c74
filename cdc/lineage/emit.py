"""Sending lineage events where cdc.yaml's `lineage` says, through the OpenLineage client's
own transports (a file, one event a line; or HTTP, with a bearer key and the CA the
server's certificate is checked against). An event that cannot be sent is a warning:
replication never waits for the lineage server."""
from __future__ import annotations

from openlineage.client import OpenLineageClient
from openlineage.client.transport.file import FileConfig, FileTransport
from openlineage.client.transport.http import HttpConfig, HttpTransport

from cdc.config.clients import read_secret
from cdc.config.models import Settings
from cdc.log import log


class Lineage:
    """The events' destination of `settings` (`enabled` False: lineage is off)."""

    def __init__(self, settings: Settings):
        self.settings, self.config = settings, settings.lineage
        self.enabled = self.config.on
        self._client: OpenLineageClient | None = None

    @property
    def namespace(self) -> str:
        return self.config.namespace

    def client(self) -> OpenLineageClient:
        if self._client is None:
            self._client = OpenLineageClient(transport=self._transport())
        return self._client

    def _transport(self):
        c, settings = self.config, self.settings
        if c.transport == "file":
            path = settings.path(c.file)
            path.parent.mkdir(parents=True, exist_ok=True)
            return FileTransport(FileConfig(log_file_path=str(path), append=True))
        api_key = read_secret(settings, c.api_key, c.api_key_file, "lineage.api_key")
        config = {"url": c.url, "endpoint": c.endpoint, "timeout": c.timeout_s, "retry": {"total": 2}}
        if api_key:
            config["auth"] = {"type": "api_key", "apiKey": api_key}
        if c.ca_file:
            config["sslContext"] = {"caCertPath": str(settings.path(c.ca_file))}
        return HttpTransport(HttpConfig.from_dict(config))

    def send(self, events: list) -> int:
        """Send `events` in order; returns how many were sent. The first that fails is logged
        (without secrets) and the rest are not tried."""
        if not self.enabled:
            return 0
        sent = 0
        for event in events:
            try:
                self.client().emit(event)
            except Exception as e:  # noqa: BLE001 - any transport's failure: replication goes on
                where = self.config.url if self.config.transport == "http" else self.settings.path(self.config.file)
                log(f"lineage: {len(events) - sent} event(s) not sent to {where}: {first_line(e)}",
                    level="warning", event="lineage-not-sent", job=event.job.name)
                break
            sent += 1
        return sent


def first_line(e: BaseException) -> str:
    """An error in one line, for a warning: its type and the first line of its text."""
    text = str(e).splitlines()
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__
