"""Secured connections: one `kafka.security` block for every Kafka client, basic auth and TLS
for Kafka Connect and the schema registry, and no secret where a person or a log reads."""
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from cdc.config.clients import http_client, java_kafka_properties, kafka_access
from cdc.config.models import KafkaSecurity, KafkaSettings, Settings, SourceSettings, TableRegistration
from cdc.errors import ConfigError
from cdc.register.connector import ConnectClient, connector_config
from cdc.register.registrar import connector_kafka_secrets

ROOT = Path(__file__).resolve().parents[2]


def settings(tmp_path: Path, kind: str = "postgresql", connect: dict | None = None, **security) -> Settings:
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "kafka.password").write_text('p"w\\d\n')
    return Settings(root=tmp_path, stack={"state_dir": str(tmp_path / "state")}, connect=connect or {},
                    kafka=KafkaSettings(bootstrap_servers="b1:9094", security=KafkaSecurity(**security)),
                    sources={"src": SourceSettings(kind=kind, database="shop", user="cdc", password="x")},
                    debezium_dir=ROOT / "debezium" / "connectors")


SCRAM = dict(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", username="cdc", password_file="kafka.password",
             ca_file="ca.pem")


def test_one_block_gives_librdkafka_and_java_clients_the_same_connection(tmp_path):
    s = settings(tmp_path, **SCRAM)
    access = kafka_access(s)
    assert access.client(**{"group.id": "g"}) == {
        "bootstrap.servers": "b1:9094", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "cdc", "sasl.password": 'p"w\\d', "ssl.ca.location": str(tmp_path / "ca.pem"),
        "group.id": "g"}
    assert 'p"w' not in repr(access)  # the secrets stay out of a traceback's locals
    props = java_kafka_properties(s)
    assert props["sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                         'username="cdc" password="p\\"w\\\\d";')
    assert props["ssl.truststore.type"] == "PEM" and props["ssl.truststore.location"] == str(tmp_path / "ca.pem")
    plain = settings(tmp_path)
    assert kafka_access(plain).client() == {"bootstrap.servers": "b1:9094", "security.protocol": "PLAINTEXT"}
    assert java_kafka_properties(plain) == {"security.protocol": "PLAINTEXT"}


def test_oauth_and_client_certificates(tmp_path, monkeypatch):
    (tmp_path / "client.p12").write_bytes(b"\x30")
    s = settings(tmp_path, protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER", username="cdc-client",
                 password="s3cret", token_endpoint_url="https://idp/token", scope="kafka",
                 keystore_file="client.p12", keystore_password="ks")
    conf = kafka_access(s).client()
    assert conf["sasl.oauthbearer.method"] == "oidc" and conf["sasl.oauthbearer.client.secret"] == "s3cret"
    assert conf["ssl.keystore.location"] == str(tmp_path / "client.p12") and conf["ssl.keystore.password"] == "ks"
    props = java_kafka_properties(s)
    assert props["sasl.jaas.config"].startswith("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule")
    assert 'clientId="cdc-client" clientSecret="s3cret" scope="kafka"' in props["sasl.jaas.config"]
    assert props["sasl.oauthbearer.token.endpoint.url"] == "https://idp/token"
    assert props["ssl.keystore.type"] == "PKCS12" and props["ssl.keystore.password"] == "ks"


@pytest.mark.parametrize("security, message", [
    (dict(protocol="SASL_SSL"), "needs sasl_mechanism"),
    (dict(protocol="SASL_SSL", sasl_mechanism="PLAIN", password="x"), "needs username"),
    (dict(protocol="SASL_SSL", sasl_mechanism="PLAIN", username="u"), "password"),
    (dict(protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER", username="u", password="x"), "token_endpoint_url"),
    (dict(protocol="SSL", username="u"), "only with protocol SASL_SSL or SASL_PLAINTEXT"),
    (dict(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", username="u", password="x", ca_file="ca.pem"),
     "only with protocol SSL or SASL_SSL"),
])
def test_an_inconsistent_security_block_is_refused_by_name(security, message):
    with pytest.raises(ValidationError, match=message):
        KafkaSecurity(**security)


def test_a_missing_secret_file_is_a_configuration_error(tmp_path):
    s = settings(tmp_path, **{**SCRAM, "password_file": "nowhere"})
    with pytest.raises(ConfigError, match="password_file .*nowhere does not exist"):
        kafka_access(s)


def test_the_mariadb_schema_history_gets_the_security_with_references_not_secrets(tmp_path, capsys):
    reg = TableRegistration(name="shop.orders", source={"name": "src", "schema": "shop", "table": "orders"})
    local = settings(tmp_path, kind="mariadb", **SCRAM)
    config = connector_config(local, "src", [reg], "ref", connector_kafka_secrets(local, "src"))
    for prefix in ("schema.history.internal.producer.", "schema.history.internal.consumer."):
        assert config[prefix + "security.protocol"] == "SASL_SSL"
        jaas = config[prefix + "sasl.jaas.config"]
        assert "${file:" in jaas and "p\\\"w" not in jaas and 'p"w' not in jaas
    secret_file = tmp_path / "state" / "connect" / "secrets" / "kafka-sasl.properties"
    # as the properties file holds it, JAAS-quoted: the worker substitutes it into the line
    assert secret_file.stat().st_mode & 0o077 == 0 and r'password=p\\"w\\\\d' in secret_file.read_text()
    # a remote Connect cluster: the configured reference, else the secret with a warning
    remote = settings(tmp_path, kind="mariadb", connect={"url": "http://connect:8083"},
                      **{**SCRAM, "connector_password_ref": "${vault:kafka:pw}"})
    assert 'password="${vault:kafka:pw}"' in connector_config(remote, "src", [reg], "ref", connector_kafka_secrets(
        remote, "src"))["schema.history.internal.producer.sasl.jaas.config"]
    bare = settings(tmp_path, kind="mariadb", connect={"url": "http://connect:8083"}, **SCRAM)
    assert connector_kafka_secrets(bare, "src") == {}
    assert "the Kafka password goes into the connector config" in capsys.readouterr().err
    # PostgreSQL's connector has no Kafka client of its own
    pg = settings(tmp_path, **SCRAM)
    assert not any(k.startswith("schema.history") for k in connector_config(pg, "src", [reg], "r"))


def test_connect_and_registry_take_basic_auth_and_a_ca(tmp_path):
    (tmp_path / "connect.password").write_text("cpw\n")
    s = settings(tmp_path, connect={"url": "https://connect:8443", "username": "ops",
                                    "password_file": "connect.password", "ca_file": "ca.pem"})
    client = ConnectClient.of(s)
    assert client.url == "https://connect:8443" and client.http.auth == ("ops", "cpw")
    assert client.http.verify == str(tmp_path / "ca.pem") and "cpw" not in repr(client.http)
    assert http_client(s, s.schema_registry, "schema_registry").auth is None
    with pytest.raises(ValidationError, match="both username and password"):
        settings(tmp_path, connect={"url": "https://c", "username": "ops"})


def test_the_connector_leaves_out_excluded_columns_and_hashes_masked_ones_with_a_referenced_key(tmp_path):
    from cdc.register.registrar import source_connector_config

    reg = TableRegistration(name="shop.people", source={"name": "src", "schema": "shop", "table": "people"},
                            mask=["email", "phone"], exclude=["ssn"])
    plain = TableRegistration(name="shop.orders", source={"name": "src", "schema": "shop", "table": "orders"})

    def local(**masking):
        s = settings(tmp_path)
        return s.model_copy(update={"masking": s.masking.model_copy(update=masking)})

    config = source_connector_config(local(key=SecretStr("k3y-ü")), "src", [reg, plain])
    assert config["column.exclude.list"] == r"shop\.people\.ssn"
    assert config["transforms"] == "cdcmask" and config["transforms.cdcmask.type"] == "cdc.connect.MaskColumns"
    assert config["transforms.cdcmask.columns"] == "shop.people.email,shop.people.phone"
    secrets = tmp_path / "state" / "connect" / "secrets" / "masking-key.properties"
    assert config["transforms.cdcmask.key.password"] == f"${{file:{secrets}:password}}" and "k3y" not in str(config)
    assert secrets.read_text() == "password=k3y-\\u00fc\n" and secrets.stat().st_mode & 0o077 == 0
    # hashed by the jobs only: no transformation (excluded columns are still left out)
    off = source_connector_config(local(key=SecretStr("k"), in_connector=False), "src", [reg])
    assert "transforms" not in off and off["column.exclude.list"] == r"shop\.people\.ssn"
    assert "column.exclude.list" not in source_connector_config(local(), "src", [plain])
    # a remote worker gets a reference, never the key
    remote = settings(tmp_path, connect={"url": "http://connect:8083"})
    with pytest.raises(ConfigError, match="whose config would show the masking key"):
        source_connector_config(remote.model_copy(update={"masking": remote.masking.model_copy(
            update={"key": SecretStr("k")})}), "src", [reg])
    ref = remote.model_copy(update={"masking": remote.masking.model_copy(
        update={"key": SecretStr("k"), "connector_key_ref": "${vault:mask}"})})
    assert source_connector_config(ref, "src", [reg])["transforms.cdcmask.key.password"] == "${vault:mask}"


def test_a_source_table_two_registrations_read_is_protected_by_the_connector_as_both_ask(tmp_path):
    from cdc.register.registrar import source_connector_config

    def reg(name, **protect):
        return TableRegistration(name=name, source={"name": "src", "schema": "shop", "table": "people"}, **protect)

    s = settings(tmp_path)
    s = s.model_copy(update={"masking": s.masking.model_copy(update={"key": SecretStr("k")})})
    both = source_connector_config(s, "src", [reg("shop.people", mask=["email", "phone", "odd,name"], exclude=["ssn"]),
                                              reg("shop.people_raw", mask=["email", "odd,name"])])
    # the jobs hash phone for the first and exclude ssn from it; a name with a comma stays with the jobs
    assert both["transforms.cdcmask.columns"] == "shop.people.email" and "column.exclude.list" not in both


def test_a_masked_array_is_refused_where_the_connector_masks(tmp_path):
    from cdc.planning.protect import check_connector_masks
    from cdc.sources.types import Column

    reg = TableRegistration(name="shop.people", source={"name": "src", "schema": "shop", "table": "people"},
                            mask=["tags", "born"])
    columns = (Column("id", "int"), Column("tags", "array", element="string"), Column("born", "date"))
    s = settings(tmp_path)
    with pytest.raises(ConfigError, match="masked array column.*tags would reach Kafka in clear"):
        check_connector_masks(s, reg, columns)
    check_connector_masks(s, reg, columns[::2])  # a date is hashed by the connector
    check_connector_masks(s.model_copy(update={"masking": s.masking.model_copy(update={"in_connector": False})}),
                          reg, columns)  # hashed by the jobs alone
