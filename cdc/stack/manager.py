"""`cdc stack up | down | status`: the whole local stack, in dependency order."""
from __future__ import annotations

import shutil

from cdc.config.models import DEBEZIUM, Settings
from cdc.sinks.catalog import local_dirs, pyiceberg_properties
from cdc.stack.kafka import SASL_MECHANISM, SASL_USER, Connect, Kafka
from cdc.stack.mariadb import MariaDB
from cdc.stack.postgres import Postgres
from cdc.stack.registry import SchemaRegistry


class Stack:
    def __init__(self, settings: Settings):
        s = settings.stack
        self.settings = settings
        state, cache = settings.state_dir, settings.path(settings.jars_dir)
        self.postgres = Postgres(state, s.postgres_port, s.start_timeout_s)
        # Unset port: not started; `down` stops one that runs all the same.
        self.mariadb = MariaDB(state, s.mariadb_port or 0, s.start_timeout_s)
        self.registry = SchemaRegistry(state, cache, s.registry_port or 0, s.registry_heap, s.start_timeout_s)
        self.kafka = Kafka(state, cache, s.kafka_port, s.kafka_controller_port, s.kafka_heap, s.start_timeout_s,
                           settings.kafka.max_record_bytes, s.kafka_sasl_port)
        self.connect = Connect(state, cache, DEBEZIUM / "connect-worker.properties",
                               s.connect_port, self.kafka, s.connect_heap, s.start_timeout_s)

    def up(self) -> None:
        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        for d in (*local_dirs(self.settings), self.settings.path(self.settings.spark.checkpoint_dir)):
            d.mkdir(parents=True, exist_ok=True)
        self.postgres.start()
        if self.settings.stack.mariadb_port:
            self.mariadb.start()
        if self.settings.stack.registry_port:
            self.registry.start()
        self.kafka.start()
        self.connect.start()

    def down(self, purge: bool = False) -> None:
        self.connect.process.stop()
        self.kafka.process.stop()
        self.registry.process.stop()
        self.postgres.stop()
        self.mariadb.stop()
        if purge:
            shutil.rmtree(self.settings.state_dir, ignore_errors=True)

    def status(self) -> dict:
        services = {}
        optional = ((("mariadb", self.mariadb),) if self.settings.stack.mariadb_port else ()) + \
            ((("registry", self.registry),) if self.settings.stack.registry_port else ())
        for name, svc in (("postgres", self.postgres), *optional, ("kafka", self.kafka), ("connect", self.connect)):
            pid = svc.process.pid()
            services[name] = {"pid": pid, "healthy": pid is not None and svc.healthy(),
                              "log": str(svc.process.log_file)}
        status = {
            "kafka_bootstrap": self.kafka.bootstrap,
            # the SASL_SSL listener: what a cdc.yaml's kafka.security takes to use it
            "kafka_sasl": ({"bootstrap": self.kafka.sasl_bootstrap, "protocol": "SASL_SSL",
                            "sasl_mechanism": SASL_MECHANISM, "username": SASL_USER,
                            "password_file": str(self.kafka.sasl_password_file), "ca_file": str(self.kafka.ca_file)}
                           if self.kafka.sasl_port else None),
            "connect_url": self.connect.url,
            "postgres_dsn": self.postgres.dsn() if self.postgres.password_file.exists() else None,
            "mariadb": ({"host": "127.0.0.1", "port": self.mariadb.port, "user": "cdc",
                         "password_file": str(self.mariadb.password_file)}
                        if self.settings.stack.mariadb_port else None),
            "schema_registry_url": self.registry.url if self.settings.stack.registry_port else None,
            "catalog": pyiceberg_properties(self.settings),
            "state_dir": str(self.settings.state_dir),
            "services": services,
        }
        return status
