"""How cdc's clients reach Kafka, Kafka Connect and the schema registry: one `kafka.security`
block turned into librdkafka settings (admin, consumers) and Java client properties
(Spark's Kafka source, the Connect worker, the MariaDB connector's schema history), and
basic auth with TLS trust for the HTTP services. Secrets are read here, at use, from the
environment or files."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

from cdc.config.loader import UNSET, unset_error
from cdc.config.models import HttpAccess, KafkaSecurity, Settings
from cdc.errors import ConfigError

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
OAUTH_CALLBACK = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
# Java client properties whose value holds a secret.
SECRET_PROPERTIES = ("sasl.jaas.config", "ssl.keystore.password")


def read_secret(settings: Settings, value: SecretStr | None, file: Path | None, what: str) -> str | None:
    """A secret given as `<what>: ${ENV}` or `<what>_file: PATH`; None when neither is set.
    A reference to a variable the environment does not set is refused here, when the secret
    is needed (config.loader.READ_WHEN_USED)."""
    if value is not None:
        if value.get_secret_value().startswith(UNSET):
            raise unset_error(what, value.get_secret_value()[len(UNSET):])
        return value.get_secret_value()
    if file is None:
        return None
    path = settings.path(file)
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        raise ConfigError(f"{what}_file {path} does not exist",
                          hint=f"point {what}_file at the secret, or set {what}: ${{ENV_NAME}}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what}_file {path} is not UTF-8 text", hint="write the secret as text") from None


@dataclass(frozen=True)
class KafkaAccess:
    """The brokers and the librdkafka settings that reach them (secrets kept out of repr)."""

    bootstrap: str
    conf: dict = field(default_factory=dict, repr=False)

    def client(self, **more) -> dict:
        """A confluent-kafka client configuration with `more` (group.id, ...)."""
        return {"bootstrap.servers": self.bootstrap, **self.conf, **more}


def kafka_access(settings: Settings) -> KafkaAccess:
    sec = settings.kafka.security
    conf: dict = {"security.protocol": sec.protocol}
    if sec.sasl:
        secret = kafka_password(settings)
        conf["sasl.mechanism"] = sec.sasl_mechanism
        if sec.sasl_mechanism == "OAUTHBEARER":
            conf.update({"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": sec.username,
                         "sasl.oauthbearer.client.secret": secret,
                         "sasl.oauthbearer.token.endpoint.url": sec.token_endpoint_url})
            if sec.scope:
                conf["sasl.oauthbearer.scope"] = sec.scope
        else:
            conf.update({"sasl.username": sec.username, "sasl.password": secret})
    if sec.tls:
        if sec.ca_file is not None:
            conf["ssl.ca.location"] = str(_existing(settings, sec.ca_file, "kafka.security.ca_file"))
        if sec.keystore_file is not None:
            conf["ssl.keystore.location"] = str(_existing(settings, sec.keystore_file, "kafka.security.keystore_file"))
            conf["ssl.keystore.password"] = kafka_keystore_password(settings) or ""
    return KafkaAccess(settings.kafka_bootstrap, conf)


def java_kafka_properties(settings: Settings, password: str | None = None,
                          keystore_password: str | None = None) -> dict[str, str]:
    """The Java Kafka client properties of `kafka.security` (unprefixed). `password` and
    `keystore_password` replace the secrets, e.g. with a config provider reference."""
    sec = settings.kafka.security
    props = {"security.protocol": sec.protocol}
    if sec.sasl:
        props["sasl.mechanism"] = sec.sasl_mechanism
        props["sasl.jaas.config"] = jaas_config(sec, password if password is not None else kafka_password(settings))
        if sec.sasl_mechanism == "OAUTHBEARER":
            props["sasl.login.callback.handler.class"] = OAUTH_CALLBACK
            props["sasl.oauthbearer.token.endpoint.url"] = sec.token_endpoint_url
    if sec.tls:
        if sec.ca_file is not None:
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.location"] = str(_existing(settings, sec.ca_file, "kafka.security.ca_file"))
        if sec.keystore_file is not None:
            props["ssl.keystore.type"] = "PKCS12"
            props["ssl.keystore.location"] = str(_existing(settings, sec.keystore_file, "kafka.security.keystore_file"))
            props["ssl.keystore.password"] = (keystore_password if keystore_password is not None
                                              else kafka_keystore_password(settings) or "")
    return props


def jaas_config(sec: KafkaSecurity, password: str) -> str:
    """The `sasl.jaas.config` line of the mechanism, its values quoted."""
    if sec.sasl_mechanism == "OAUTHBEARER":
        values = {"clientId": sec.username, "clientSecret": password, "scope": sec.scope}
    else:
        values = {"username": sec.username, "password": password}
    options = " ".join(f'{k}="{jaas_quoted(v)}"' for k, v in values.items() if v is not None)
    return f"{LOGIN_MODULES[sec.sasl_mechanism]} required {options};"


def jaas_quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def kafka_password(settings: Settings) -> str:
    sec = settings.kafka.security
    secret = read_secret(settings, sec.password, sec.password_file, "kafka.security.password")
    if not secret:
        raise ConfigError("kafka.security.password is empty",
                          hint="set kafka.security.password: ${KAFKA_PASSWORD} or password_file: PATH")
    return secret


def kafka_keystore_password(settings: Settings) -> str | None:
    sec = settings.kafka.security
    return read_secret(settings, sec.keystore_password, sec.keystore_password_file, "kafka.security.keystore_password")


def _existing(settings: Settings, path: Path, what: str) -> Path:
    found = settings.path(path)
    if not found.is_file():
        raise ConfigError(f"{what} {found} does not exist", hint=f"point {what} at the file")
    return found


@dataclass(frozen=True)
class HttpClient:
    """What `requests` is given for an HTTP service: basic auth and the TLS trust."""

    auth: tuple[str, str] | None = field(default=None, repr=False)
    verify: bool | str = True


def http_client(settings: Settings, access: HttpAccess, what: str) -> HttpClient:
    password = read_secret(settings, access.password, access.password_file, f"{what}.password")
    auth = (access.username, password) if access.username else None
    verify = str(_existing(settings, access.ca_file, f"{what}.ca_file")) if access.ca_file is not None else True
    return HttpClient(auth, verify)
