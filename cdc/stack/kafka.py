"""Apache Kafka (KRaft, one node) and a Kafka Connect worker in distributed mode, both
from the jars `make setup` fetched, with the Debezium plugins on Connect's plugin path."""
from __future__ import annotations

import base64
import secrets
import subprocess
import uuid
from pathlib import Path

import requests
from confluent_kafka.admin import AdminClient

from cdc.config.clients import jaas_config
from cdc.config.models import KafkaSecurity
from cdc.errors import StackError
from cdc.stack.process import Process, java, port_accepts, require_free_port

TEMPLATES = Path(__file__).parent / "templates"
POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"


def jars_dir(cache: Path, part: str) -> Path:
    d = cache / part
    if not d.is_dir() or not any(d.iterdir()):
        raise StackError(f"the JVM jars are missing from {d}", hint="run `make setup` to fetch them from Maven Central")
    return d


SASL_USER, SASL_MECHANISM = "cdc", "SCRAM-SHA-512"
SASL_SETTINGS = """
# The SASL_SSL listener (stack.kafka_sasl_port): SCRAM-SHA-512 over TLS, with a
# certificate signed by the stack's own CA (tls/ca.pem), made at the first `stack up`.
sasl.enabled.mechanisms={mechanism}
listener.name.sasl_ssl.sasl.enabled.mechanisms={mechanism}
listener.name.sasl_ssl.{mechanism_lower}.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PKCS12
listener.name.sasl_ssl.ssl.keystore.location={keystore}
listener.name.sasl_ssl.ssl.keystore.password={store_password}
"""


class Kafka:
    def __init__(self, state_dir: Path, cache: Path, port: int, controller_port: int, heap: str, timeout_s: int,
                 max_record_bytes: int, sasl_port: int | None = None):
        self.dir = state_dir / "kafka"
        self.sasl_port = sasl_port
        self.tls_dir = self.dir / "tls"
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

    @property
    def sasl_bootstrap(self) -> str | None:
        """The SASL_SSL listener (None: there is none)."""
        return f"127.0.0.1:{self.sasl_port}" if self.sasl_port else None

    @property
    def ca_file(self) -> Path:
        """The stack CA's certificate (PEM): what clients of the SASL_SSL listener trust."""
        return self.tls_dir / "ca.pem"

    @property
    def sasl_password_file(self) -> Path:
        """The password of the SCRAM user `cdc` of the SASL_SSL listener."""
        return self.tls_dir / "cdc.password"

    def sasl_client(self) -> dict:
        """A librdkafka configuration for the SASL_SSL listener."""
        return {"bootstrap.servers": self.sasl_bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanism": SASL_MECHANISM, "sasl.username": SASL_USER,
                "sasl.password": self.sasl_password_file.read_text().strip(), "ssl.ca.location": str(self.ca_file)}

    def java_client_properties(self) -> dict[str, str]:
        """Java client properties for the SASL_SSL listener (the Connect worker's)."""
        user = KafkaSecurity(protocol="SASL_SSL", sasl_mechanism=SASL_MECHANISM, username=SASL_USER,
                             password_file=self.sasl_password_file)
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": SASL_MECHANISM,
                "sasl.jaas.config": jaas_config(user, self.sasl_password_file.read_text().strip()),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_file)}

    def healthy(self) -> bool:
        if not port_accepts(self.port):
            return False
        return _answers({"bootstrap.servers": self.bootstrap})

    def sasl_healthy(self) -> bool:
        return port_accepts(self.sasl_port) and _answers(self.sasl_client())

    def _java(self, main: str, *args: str) -> list[str]:
        return [java(), f"-Xmx{self.heap}", f"-Xms{self.heap}", "-XX:+UseG1GC",
                f"-Dlog4j2.configurationFile={TEMPLATES / 'log4j2.properties'}",
                "-cp", str(jars_dir(self.cache, "kafka") / "*"), main, *args]

    def start(self) -> None:
        if self.process.pid() is not None:  # running already, or still starting
            self.process.wait_healthy(self.healthy, self.timeout_s)
            if self.sasl_port and not (self.sasl_password_file.exists() and self.sasl_healthy()):
                raise StackError(f"Kafka runs without its SASL_SSL listener on port {self.sasl_port} "
                                 f"(stack.kafka_sasl_port was set after it started)",
                                 hint="restart the stack: `cdc stack down`, then `cdc stack up`")
            return
        require_free_port(self.port, "Kafka", "kafka_port")
        require_free_port(self.controller_port, "Kafka's controller", "kafka_controller_port")
        data = self.dir / "data"
        props = self.dir / "server.properties"
        self.dir.mkdir(parents=True, exist_ok=True)
        sasl_listener, sasl_settings = "", ""
        if self.sasl_port:
            require_free_port(self.sasl_port, "Kafka's SASL_SSL listener", "kafka_sasl_port")
            keystore, store_password = self._tls_material()
            sasl_listener = f",SASL_SSL://127.0.0.1:{self.sasl_port}"
            sasl_settings = SASL_SETTINGS.format(mechanism=SASL_MECHANISM, mechanism_lower=SASL_MECHANISM.lower(),
                                                 keystore=keystore, store_password=store_password)
        props.write_text((TEMPLATES / "kafka-server.properties").read_text().format(
            port=self.port, controller_port=self.controller_port, data_dir=data,
            max_record_bytes=self.max_record_bytes, sasl_listener=sasl_listener, sasl_settings=sasl_settings))
        props.chmod(0o600)
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
        if self.sasl_port:
            self._scram_user()
            self.process.wait_healthy(self.sasl_healthy, self.timeout_s)

    def _keytool(self, *args: str, stdin: str | None = None) -> str:
        out = subprocess.run([str(Path(java()).parent / "keytool"), *args], input=stdin, capture_output=True, text=True)
        if out.returncode != 0:
            raise StackError(f"keytool {args[0]} failed (exit {out.returncode}): {(out.stdout + out.stderr)[-1500:]}")
        return out.stdout

    def _tls_material(self) -> tuple[Path, str]:
        """The broker's keystore (a key and a certificate for 127.0.0.1 signed by the
        stack's CA), its password, the CA certificate for clients and the SCRAM user's
        password: made once, kept in tls/ (owner-only)."""
        d = self.tls_dir
        keystore, ca_store, store_password_file = d / "broker.p12", d / "ca.p12", d / "store.password"
        if all(f.exists() for f in (keystore, self.ca_file, self.sasl_password_file, store_password_file)):
            return keystore, store_password_file.read_text().strip()
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o700)
        for f in (keystore, ca_store, self.ca_file):
            f.unlink(missing_ok=True)
        store_password = secrets.token_urlsafe(18)
        store_password_file.write_text(store_password)
        store = ("-storetype", "PKCS12", "-storepass", store_password, "-keypass", store_password)
        key = ("-keyalg", "RSA", "-keysize", "2048", "-validity", "3650")
        self._keytool("-genkeypair", "-alias", "ca", "-dname", "CN=cdc local stack CA", "-ext", "bc:c",
                      *key, "-keystore", str(ca_store), *store)
        self._keytool("-exportcert", "-rfc", "-alias", "ca", "-keystore", str(ca_store), "-file", str(self.ca_file),
                      *store)
        self._keytool("-genkeypair", "-alias", "broker", "-dname", "CN=127.0.0.1", *key,
                      "-keystore", str(keystore), *store)
        request = self._keytool("-certreq", "-alias", "broker", "-keystore", str(keystore), *store)
        signed = self._keytool("-gencert", "-rfc", "-alias", "ca", "-keystore", str(ca_store), "-validity", "3650",
                               "-ext", "SAN=IP:127.0.0.1,DNS:localhost", *store, stdin=request)
        self._keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(self.ca_file),
                      "-keystore", str(keystore), *store)
        self._keytool("-importcert", "-noprompt", "-alias", "broker", "-keystore", str(keystore), *store,
                      stdin=signed)
        self.sasl_password_file.write_text(secrets.token_urlsafe(24))
        for f in (keystore, ca_store, store_password_file, self.sasl_password_file):
            f.chmod(0o600)
        return keystore, store_password

    def _scram_user(self) -> None:
        """The SCRAM credential of user `cdc`, set through the PLAINTEXT listener
        (an upsert: the same at every start)."""
        from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        upsert = UserScramCredentialUpsertion(SASL_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                              self.sasl_password_file.read_text().strip().encode())
        client = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        for fut in client.alter_user_scram_credentials([upsert]).values():
            try:
                fut.result(30)
            except Exception as e:  # noqa: BLE001 - KafkaException, or a timeout
                raise StackError(f"setting the SCRAM user {SASL_USER} of Kafka's SASL_SSL listener failed: {e}",
                                 hint=f"see {self.process.log_file}") from None


def _answers(conf: dict) -> bool:
    try:
        AdminClient({**conf, "socket.timeout.ms": 2000, "log_level": 0}).list_topics(timeout=2)
        return True
    except Exception:  # noqa: BLE001 - any failure means not ready yet
        return False


class Connect:
    def __init__(self, state_dir: Path, cache: Path, worker_template: Path, port: int, kafka: Kafka,
                 heap: str, timeout_s: int):
        self.dir = state_dir / "connect"
        self.cache = cache
        self.worker_template = worker_template
        self.port = port
        self.kafka = kafka  # reached through its SASL_SSL listener when it has one
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
        text = self.worker_template.read_text().format(
            bootstrap=self.kafka.sasl_bootstrap or self.kafka.bootstrap, port=self.port,
            plugin_path=jars_dir(self.cache, "connect-plugins"))
        if self.kafka.sasl_port:  # the worker's own clients, and those it makes for connectors
            props = self.kafka.java_client_properties()
            text += "\n# Kafka through the SASL_SSL listener: the worker's clients and the connectors'.\n" + "".join(
                f"{prefix}{k}={v.replace(chr(92), chr(92) * 2)}\n"
                for prefix in ("", "producer.", "consumer.", "admin.") for k, v in props.items())
        worker.write_text(text)
        worker.chmod(0o600)
        self.process.start([java(), f"-Xmx{self.heap}", f"-Xms{self.heap}", "-XX:+UseG1GC",
                            f"-Dlog4j2.configurationFile={TEMPLATES / 'log4j2.properties'}",
                            "-cp", str(jars_dir(self.cache, "kafka") / "*"),
                            "org.apache.kafka.connect.cli.ConnectDistributed", str(worker)])
        self.process.wait_healthy(self.healthy, self.timeout_s)
