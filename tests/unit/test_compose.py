"""docker-compose.yml and cdc.docker.yaml describe one deployment: the ports, service names
and credentials on either side agree, and the images are the versions jvm/ pins. Both files
are read as YAML; no Docker engine is needed."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from cdc.config import load_settings
from cdc.config.models import CONNECTOR_TEMPLATES, REGISTRY_CONFLUENT_API, REGISTRY_NATIVE_API

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
DOCKER_TEXT = (ROOT / "cdc.docker.yaml").read_text()
DOCKER = yaml.safe_load(DOCKER_TEXT)
POM = "{http://maven.apache.org/POM/4.0.0}"
# A PostgreSQL image's "15.20" is a patch release; every other image names major.minor.patch
# (Debezium's and Apicurio's with their .Final) or, for MinIO, a dated release.
EXACT_TAG = {"postgres": r"\d+\.\d+", "minio": r"RELEASE\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ",
             "minio-init": r"RELEASE\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ"}
THREE_PART = r"\d+\.\d+\.\d+(\.Final)?"


def pom_properties() -> dict[str, str]:
    """The <properties> of jvm/pom.xml and of every module's pom, merged."""
    props: dict[str, str] = {}
    for pom in sorted((ROOT / "jvm").glob("**/pom.xml")):
        if "target" in pom.relative_to(ROOT / "jvm").parts:
            continue
        section = ET.parse(pom).getroot().find(f"{POM}properties")
        for p in section if section is not None else []:
            name, value = p.tag.removeprefix(POM), (p.text or "").strip()
            assert props.setdefault(name, value) == value, f"{name} differs between the poms"
    return props


JVM = pom_properties()


def image(service: str) -> tuple[str, str]:
    name, _, tag = SERVICES[service]["image"].rpartition(":")
    assert name and "/" not in tag, f"{service}: image {SERVICES[service]['image']!r} names no tag"
    return name, tag


def env(service: str) -> dict[str, str]:
    return {k: str(v) for k, v in SERVICES[service].get("environment", {}).items()}


def published(service: str, container_port: int) -> int:
    """The host port a service publishes its container port on."""
    for spec in SERVICES[service].get("ports", []):
        host, _, container = str(spec).rpartition(":")
        if int(container) == container_port:
            return int(host.rpartition(":")[2])
    raise AssertionError(f"{service} publishes no port for its {container_port}")


def listeners(value: str) -> dict[str, str]:
    """KAFKA_*LISTENERS as {name: host:port}."""
    return {name: address.removeprefix("//") for name, address in (x.split(":", 1) for x in value.split(","))}


def commented_source(name: str) -> dict:
    """A source cdc.docker.yaml shows commented out, as it reads once uncommented."""
    lines = DOCKER_TEXT.splitlines()
    block = []
    for line in lines[lines.index(f"  # {name}:"):]:
        if not line.startswith("  # "):
            break
        block.append(line.removeprefix("  # "))
    return yaml.safe_load("\n".join(block))[name]


@pytest.fixture
def settings(monkeypatch):
    """cdc.docker.yaml as cdc loads it, its secrets from the environment."""
    for name in ("CDC_PG_PASSWORD", "CDC_MINIO_USER", "CDC_MINIO_PASSWORD"):
        monkeypatch.setenv(name, "x")
    return load_settings(ROOT / "cdc.docker.yaml")


@pytest.mark.parametrize("service, name, prop", [
    ("kafka", "apache/kafka", "kafka.version"),
    ("connect", "quay.io/debezium/connect", "debezium.version"),
    ("schema-registry", "apicurio/apicurio-registry-kafkasql", "apicurio.registry.version"),
    ("iceberg-rest", "apache/iceberg-rest-fixture", "iceberg.rest.version"),
])
def test_images_are_the_versions_jvm_pins(service, name, prop):
    assert image(service) == (name, JVM[prop])


def test_no_image_floats():
    assert "latest" not in (ROOT / "docker-compose.yml").read_text()
    for service in SERVICES:
        tag = image(service)[1]
        assert re.fullmatch(EXACT_TAG.get(service, THREE_PART), tag), f"{service}: tag {tag!r} is not one release"


def test_every_service_is_health_checked_and_waited_for():
    one_shot = {s for s, spec in SERVICES.items() if spec.get("restart") == "no"}
    for service, spec in SERVICES.items():
        if service not in one_shot:
            assert spec.get("healthcheck", {}).get("test"), f"{service} has no health check"
        for dependency, wait in spec.get("depends_on", {}).items():
            expected = "service_completed_successfully" if dependency in one_shot else "service_healthy"
            assert wait == {"condition": expected}, f"{service} starts before {dependency} is ready"


def test_data_lives_in_named_volumes():
    data = {"postgres": "/var/lib/postgresql/data", "mariadb": "/var/lib/mysql",
            "kafka": env("kafka")["KAFKA_LOG_DIRS"], "minio": SERVICES["minio"]["command"][1],
            "iceberg-rest": str(Path(env("iceberg-rest")["CATALOG_URI"].removeprefix("jdbc:sqlite:")).parent)}
    for service, path in data.items():
        mounts = dict(v.split(":", 1) for v in SERVICES[service]["volumes"] if isinstance(v, str))
        assert path in mounts.values(), f"{service} keeps {path} in no volume"
        volume = next(name for name, target in mounts.items() if target == path)
        assert volume in COMPOSE["volumes"], f"{service}: {volume} is not a named volume"


def test_kafka_addresses_agree(settings):
    kafka = env("kafka")
    bound, advertised = listeners(kafka["KAFKA_LISTENERS"]), listeners(kafka["KAFKA_ADVERTISED_LISTENERS"])
    host, port = advertised["EXTERNAL"].rsplit(":", 1)
    assert DOCKER["kafka"]["bootstrap_servers"] == f"127.0.0.1:{port}" == settings.kafka_bootstrap
    assert published("kafka", int(bound["EXTERNAL"].rsplit(":", 1)[1])) == int(port)
    internal = f"kafka:{bound['INTERNAL'].rsplit(':', 1)[1]}"
    assert advertised["INTERNAL"] == internal
    assert env("connect")["BOOTSTRAP_SERVERS"] == env("schema-registry")["KAFKA_BOOTSTRAP_SERVERS"] == internal
    assert int(kafka["KAFKA_MESSAGE_MAX_BYTES"]) == int(kafka["KAFKA_REPLICA_FETCH_MAX_BYTES"]) \
        == settings.kafka.max_record_bytes


def test_connect_url_agrees(settings):
    url = urlsplit(DOCKER["connect"]["url"])
    assert (url.hostname, url.port) == ("127.0.0.1", published("connect", 8083))
    assert settings.connect_url == DOCKER["connect"]["url"]


def test_schema_registry_urls_agree(settings):
    assert settings.registry_url == f"http://127.0.0.1:{published('schema-registry', 8080)}{REGISTRY_CONFLUENT_API}"
    # The converter runs in the Connect container: the registry by its service name.
    assert settings.registry_converter_url == f"http://schema-registry:8080{REGISTRY_NATIVE_API}"


def test_catalog_agrees(settings):
    rest, props = env("iceberg-rest"), DOCKER["catalog"]["properties"]
    uri, s3 = urlsplit(DOCKER["catalog"]["uri"]), urlsplit(props["s3.endpoint"])
    assert (uri.hostname, uri.port) == ("127.0.0.1", published("iceberg-rest", 8181))
    assert (s3.hostname, s3.port) == ("127.0.0.1", published("minio", 9000))
    assert rest["CATALOG_S3_ENDPOINT"] == "http://minio:9000"
    assert DOCKER["catalog"]["warehouse"] == rest["CATALOG_WAREHOUSE"]
    assert props["io-impl"] == rest["CATALOG_IO__IMPL"]
    assert props["s3.path-style-access"] == rest["CATALOG_S3_PATH__STYLE__ACCESS"]
    bucket = urlsplit(rest["CATALOG_WAREHOUSE"]).hostname
    assert f"store/{bucket}" in SERVICES["minio-init"]["command"][0]


@pytest.mark.parametrize("name, service, container_port, database, user", [
    ("stack_postgres", "postgres", 5432, "POSTGRES_DB", "POSTGRES_USER"),
    ("stack_mariadb", "mariadb", 3306, "MARIADB_DATABASE", "MARIADB_USER"),
])
def test_sources_agree(name, service, container_port, database, user):
    src = DOCKER["sources"][name] if name in DOCKER["sources"] else commented_source(name)
    # cdc on the host: the published port; the connector in Connect: the service name.
    assert (src["host"], src["port"]) == ("127.0.0.1", published(service, container_port))
    assert (src["connector_host"], src["connector_port"]) == (service, container_port)
    assert (src["database"], src["user"]) == (env(service)[database], env(service)[user])
    # The connector config names the password through Connect's environment.
    var = re.fullmatch(r"\$\{env:(\w+)\}", src["connector_password_ref"])[1]
    assert src["password"] == f"${{{var}}}"
    assert env("connect")[var] == next(v for k, v in env(service).items()
                                       if k.endswith("_PASSWORD") and "ROOT" not in k)
    assert env("connect")["CONNECT_CONFIG_PROVIDERS"] == "env"
    assert env("connect")["CONNECT_CONFIG_PROVIDERS_ENV_CLASS"].endswith(".EnvVarConfigProvider")


def test_postgres_is_set_up_for_capture():
    assert "wal_level=logical" in SERVICES["postgres"]["command"]
    assert {"--binlog-format=ROW", "--binlog-row-image=FULL"} <= set(SERVICES["mariadb"]["command"])


def test_connect_has_the_avro_converter_of_jvm():
    """The converter the Avro template names is on Connect's plugin path, mounted from
    where jvm/debezium/pom.xml puts it, and its health check waits for it."""
    converter = json.loads((CONNECTOR_TEMPLATES / "avro-converter.json").read_text())["value.converter"]
    connector = json.loads((CONNECTOR_TEMPLATES / "postgres-connector.json").read_text())["connector.class"]
    health = " ".join(SERVICES["connect"]["healthcheck"]["test"])
    assert converter in health and connector in health
    pom = ET.parse(ROOT / "jvm" / "debezium" / "pom.xml").getroot()
    execution = next(e for e in pom.iter(f"{POM}execution") if e.findtext(f"{POM}id") == "copy-avro-converter")
    fetched = execution.find(f"{POM}configuration").findtext(f"{POM}outputDirectory")
    fetched = ROOT / fetched.replace("${cdc.cache}", DOCKER["jars_dir"])
    mounts = {Path(v["target"]).name: v for v in SERVICES["connect"]["volumes"] if isinstance(v, dict)}
    mount = mounts["apicurio-avro-converter"]
    assert (ROOT / mount["source"]).resolve() == fetched.resolve()
    assert Path(mount["target"]).parent == Path("/kafka/connect") and mount["read_only"]
    # cdc's MaskColumns, where debezium/transforms/pom.xml builds it
    transforms = ET.parse(ROOT / "debezium" / "transforms" / "pom.xml").getroot()
    built = next(transforms.iter(f"{POM}outputDirectory")).text.replace("${cdc.cache}", DOCKER["jars_dir"])
    assert (ROOT / mounts["cdc-transforms"]["source"]).resolve() == (ROOT / built).resolve()
    assert "cdc.connect.MaskColumns" in health
    # The image's own Apicurio converters (another line than the template's settings) stay off.
    assert env("connect").get("ENABLE_APICURIO_CONVERTERS", "false") == "false"


def test_compose_state_is_its_own(settings):
    local = yaml.safe_load((ROOT / "cdc.yaml").read_text())["stack"]["state_dir"]
    state = DOCKER["stack"]["state_dir"]
    assert Path(state) != Path(local)
    assert settings.path(settings.spark.checkpoint_dir).is_relative_to(settings.state_dir)
    assert settings.path(settings.delta.root).is_relative_to(settings.state_dir)
    assert f"{state}/" in (ROOT / ".gitignore").read_text().splitlines()
