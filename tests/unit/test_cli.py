import json
import re

import pytest
import yaml

from cdc.cli import init, main as cli
from cdc.cli.main import main
from cdc.config import load_settings


@pytest.fixture(autouse=True)
def no_terminal(monkeypatch):
    """Standard input is no terminal (as under cron), even when pytest runs on one."""
    monkeypatch.setattr(cli.prompt, "interactive", lambda: False)


def test_bad_config_exits_2_with_the_problem(tmp_path, capsys):
    cfg = tmp_path / "cdc.yaml"
    cfg.write_text("stack:\n  kafka_port: not-a-port\n")
    assert main(["--config", str(cfg), "run", "--available-now"]) == 2
    err = capsys.readouterr().err
    assert "stack.kafka_port" in err and "not-a-port" in err


def test_missing_config_exits_2(tmp_path, capsys):
    assert main(["--config", str(tmp_path / "none.yaml"), "register"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_flags_in_the_wrong_place_exit_2(capsys):
    for argv in (["stack", "up", "--purge"], ["stack", "up", "--json"], ["stack", "down", "--json"],
                 ["stack", "status", "--purge"], ["reconcile", "--json", "--format", "html"]):
        with pytest.raises(SystemExit) as exit:
            main(argv)
        assert exit.value.code == 2, argv
    assert "--purge" in capsys.readouterr().err


def test_global_options_go_before_or_after_the_command(tmp_path, capsys):
    missing = str(tmp_path / "none.yaml")
    for argv in (["--config", missing, "register"], ["register", "--config", missing],
                 ["--config", "cdc.yaml", "status", "--config", missing], ["stack", "status", "--config", missing],
                 ["stack", "--config", missing, "status", "--json"], ["tables", "list", "--config", missing]):
        assert main(argv) == 2, argv
        assert f"{missing} does not exist" in capsys.readouterr().err, argv
    assert main(["register", "--log-format", "json", "--config", missing]) == 2
    assert json.loads(capsys.readouterr().err)["exit_code"] == 2
    args = cli.parser().parse_args(["--config", "a.yaml", "--log-format", "json", "run"])
    assert (args.config, args.log_format) == ("a.yaml", "json")  # before the command: not reset by it


def test_version(capsys, monkeypatch):
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0 and re.fullmatch(r"cdc \S+\n", capsys.readouterr().out)

    def not_installed(name):
        raise cli.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(cli.metadata, "version", not_installed)
    pyproject = (cli.Path(cli.__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert f'version = "{cli.version()}"' in pyproject


def test_commands_with_structured_output_take_json():
    p = cli.parser()
    for argv in (["stack", "status"], ["tables", "list"], ["status"], ["doctor"], ["reconcile"]):
        assert p.parse_args([*argv, "--json"]).json is True, argv
    assert p.parse_args(["reconcile", "--format", "json"]).format == "json"  # still spelled that way too


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A cdc.yaml with one source and three registrations, as the current directory."""
    (tmp_path / "cdc.yaml").write_text("sources:\n  shop:\n    kind: postgresql\n    database: shop\n    user: cdc\n")
    (tmp_path / "tables").mkdir()
    for name in ("shop.orders", "shop.lines", "crm.people"):
        (tmp_path / "tables" / f"{name}.yaml").write_text(
            f"name: {name}\nsource: {{schema: public, table: {name.split('.')[1]}}}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CDC_CONFIG", raising=False)
    return tmp_path


def test_table_selections_reach_the_command(project, monkeypatch):
    import cdc.jobs.supervisor

    seen = []
    monkeypatch.setattr(cdc.jobs.supervisor, "run", lambda settings, tables, available_now, cut, selection:
                        seen.append(([t.name for t in tables], selection)))
    assert main(["run", "--table", "shop.*", "--table", "crm.people"]) == 0
    assert main(["run", "--available-now"]) == 0
    tables = ["crm.people", "shop.lines", "shop.orders"]
    assert seen == [(tables, ["shop.*", "crm.people"]), (tables, None)]  # a continuous job follows its selection
    assert main(["run", "--table", "sales.*"]) == 2


def test_commands_on_one_table_refuse_several(project, capsys, monkeypatch):
    import cdc.bootstrap.load
    import cdc.jobs.replay

    monkeypatch.setattr(cdc.bootstrap.load, "bootstrap", lambda *a, **k: pytest.fail("bootstrapped"))
    monkeypatch.setattr(cdc.jobs.replay, "replay", lambda *a, **k: pytest.fail("replayed"))
    for argv in (["bootstrap", "--yes", "--table", "shop.orders", "--table", "shop.lines"],
                 ["bootstrap", "--yes", "--table", "shop.*"], ["replay", "--from-earliest", "--table", "*"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"cdc {argv[0]} acts on one table" in err and "shop.lines" in err and "--table NAME" in err
    assert main(["tables", "remove", "shop.*"]) == 2
    assert "not a pattern" in capsys.readouterr().err


def test_bootstrap_asks_before_emptying_a_target(project, capsys, monkeypatch):
    import cdc.bootstrap.load

    answers = []

    def bootstrap(settings, reg, method, chunk_rows, restart, confirm):
        answers.append(None if confirm is None else confirm("empty shop.orders?"))

    monkeypatch.setattr(cdc.bootstrap.load, "bootstrap", bootstrap)
    assert main(["bootstrap", "--table", "shop.orders", "--yes"]) == 0 and answers == [None]
    # No terminal to ask on: refused, naming --yes.
    assert main(["bootstrap", "--table", "shop.orders"]) == 2
    err = capsys.readouterr().err
    assert "empty shop.orders?" in err and "no terminal" in err and "pass --yes" in err
    monkeypatch.setattr(cli.prompt, "interactive", lambda: True)
    for typed, answer in (("y", True), ("", False), ("no", False)):
        monkeypatch.setattr("builtins.input", lambda question: typed)
        assert main(["bootstrap", "--table", "shop.orders"]) == 0 and answers[-1] is answer


def test_tables_add_takes_the_source_table_as_an_argument(project, capsys, monkeypatch):
    import cdc.register.tables

    added = []

    def add(settings, schema, table, **options):
        added.append((schema, table))
        path = project / "tables" / f"{schema}.{table}.yaml"
        path.write_text("written\n")
        return path

    monkeypatch.setattr(cdc.register.tables, "add", add)
    assert main(["tables", "add", "shop.orders"]) == 0
    assert main(["tables", "add", "orders", "--schema", "shop"]) == 0
    assert "deprecated" not in capsys.readouterr().err
    assert main(["tables", "add", "--schema", "shop", "--table", "orders"]) == 0  # the old spelling still works
    assert "deprecated: `cdc tables add --table TABLE` (the source table): use `cdc tables add SCHEMA.TABLE`" \
        in capsys.readouterr().err
    assert added == [("shop", "orders")] * 3
    for argv, error in ((["tables", "add", "orders"], "needs its schema"),
                        (["tables", "add"], "needs the source table"),
                        (["tables", "add", "crm.orders", "--schema", "shop"], "is not in --schema 'shop'"),
                        (["tables", "add", "shop.orders", "--table", "orders"], "got the source table twice")):
        assert main(argv) == 2, argv
        assert error in capsys.readouterr().err, argv
    assert len(added) == 3


def test_metrics_port_must_be_a_tcp_port(capsys):
    import pytest

    for bad in ("0", "70000", "http"):
        with pytest.raises(SystemExit) as exit:
            main(["run", "--metrics-port", bad])
        assert exit.value.code == 2
        assert "--metrics-port" in capsys.readouterr().err


def test_metrics_port_in_use_is_a_clear_error():
    import socket

    import pytest

    from cdc.errors import ConfigError
    from cdc.jobs.metrics import serve

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(ConfigError, match=f"cannot serve metrics on port {sock.getsockname()[1]}"):
            serve(sock.getsockname()[1], address="127.0.0.1")


def test_log_lines_as_json(tmp_path, capsys, monkeypatch):
    import json

    from cdc.log import log

    assert main(["--log-format", "json", "--config", str(tmp_path / "none.yaml"), "register"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    doc = json.loads(line)
    assert doc["level"] == "error" and doc["event"] == "error" and doc["exit_code"] == 2
    assert "does not exist" in doc["error"] and doc["time"].endswith("+00:00")
    log("batch 3 applied", table="shop.orders", event="batch-applied", records=12, steps={"merge": 1.5})
    doc = json.loads(capsys.readouterr().err)
    assert (doc["table"], doc["records"], doc["steps"]) == ("shop.orders", 12, {"merge": 1.5})

    monkeypatch.setenv("CDC_LOG_FORMAT", "text")  # the next command is plain text again
    assert main(["--config", str(tmp_path / "none.yaml"), "register"]) == 2
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ERROR   cdc: error: .*", capsys.readouterr().err,
                        flags=re.S)
    log("caught up", table="shop.orders")
    assert re.fullmatch(r"\S+Z INFO    shop.orders: caught up\n", capsys.readouterr().err)


def test_capture_restart_of_an_unknown_source_exits_2(tmp_path, capsys):
    cfg = tmp_path / "cdc.yaml"
    cfg.write_text("sources:\n  shop:\n    kind: postgresql\n    database: shop\n    user: cdc\n")
    assert main(["--config", str(cfg), "capture", "restart", "--source", "nope"]) == 2
    err = capsys.readouterr().err
    assert "source 'nope' is not in cdc.yaml" in err and "sources: shop" in err


INIT = ["init", "--kafka", "kafka1:9092,kafka2:9092", "--connect", "http://connect:8083", "--catalog-uri",
        "http://catalog:8181", "--catalog-warehouse", "s3://lake/warehouse", "--source-host", "db.internal",
        "--source-database", "shop", "--source-user", "cdc_reader"]


def test_init_writes_a_cdc_yaml_that_loads(tmp_path, capsys, monkeypatch):
    out = tmp_path / "cdc.yaml"
    monkeypatch.delenv("CDC_SHOP_PASSWORD", raising=False)
    assert main([*INIT, "--output", str(out)]) == 0
    assert "export CDC_SHOP_PASSWORD" in capsys.readouterr().out
    text = out.read_text()
    assert "password: ${CDC_SHOP_PASSWORD}" in text and text.startswith("# cdc against an existing Kafka")
    monkeypatch.setenv("CDC_SHOP_PASSWORD", "pw")
    settings = load_settings(out)
    assert settings.kafka_bootstrap == "kafka1:9092,kafka2:9092" and settings.connect_url == "http://connect:8083"
    assert (settings.catalog.type, settings.catalog.uri, settings.catalog.warehouse) == (
        "rest", "http://catalog:8181", "s3://lake/warehouse")
    src = settings.sources["shop"]
    assert (src.kind, src.host, src.port, src.database, src.user) == ("postgresql", "db.internal", 5432, "shop",
                                                                     "cdc_reader")
    assert list(tmp_path.iterdir()) == [out]

    assert main([*INIT, "--output", str(out), "--source-kind", "mariadb"]) == 2  # never overwritten ...
    assert "exists" in capsys.readouterr().err and out.read_text() == text
    assert main([*INIT, "--output", str(out), "--force", "--source-kind", "mariadb", "--source-name", "orders_db",
                 "--source-password-file", "/run/secrets/db", "--kafka-security", "SASL_SSL", "--kafka-user", "cdc",
                 "--kafka-password-env", "${KAFKA_SECRET}", "--schema-registry", "http://registry:8081"]) == 0
    monkeypatch.setenv("KAFKA_SECRET", "k")
    settings = load_settings(out)  # ... but with --force
    src = settings.sources["orders_db"]
    assert (src.kind, src.port, str(src.password_file), src.password) == ("mariadb", 3306, "/run/secrets/db", None)
    security = settings.kafka.security
    assert (security.protocol, security.sasl_mechanism, security.username) == ("SASL_SSL", "SCRAM-SHA-512", "cdc")
    assert security.password.get_secret_value() == "k" and "${KAFKA_SECRET}" in out.read_text()
    assert settings.registry_url == "http://registry:8081"


def test_init_refuses_what_would_not_load_and_leaves_no_file(tmp_path, capsys):
    out = tmp_path / "cdc.yaml"
    for extra, error in ((["--catalog-uri", "ftp://catalog"], f"{out}: catalog.uri: uri 'ftp://catalog' is not an "
                                                              f"http(s) URL"),
                         (["--source-user", "no such user"], "user 'no such user' is not a plain identifier"),
                         (["--source-name", "my-shop"], "--source-name 'my-shop' is not a plain identifier"),
                         (["--kafka", "not a host"], "broker 'not a host' is not host:port"),
                         (["--connect", "ftp://x"], "url 'ftp://x' is not an http(s) URL"),
                         (["--source-host", "db internal"], "host 'db internal' is not a host name"),
                         (["--source-password-env", "hunter2 is my password"], "is not an environment variable's name"),
                         (["--catalog-type", "sqlite", "--catalog-warehouse", "s3://x"],
                          "object storage needs type rest"),
                         (["--kafka-user", "cdc"], "--kafka-user: only with --kafka-security SASL_SSL or SASL_PLAINTEXT"),
                         (["--output", str(tmp_path / "none" / "cdc.yaml")], "none is not a directory")):
        assert main([*INIT, "--output", str(out), *extra]) == 2, extra
        err = capsys.readouterr().err
        assert error in err and "hunter2" not in err, (extra, err)
        assert list(tmp_path.iterdir()) == [], extra


def test_init_names_every_missing_option_without_a_terminal(tmp_path, capsys):
    assert main(["init", "--output", str(tmp_path / "cdc.yaml"), "--kafka", "k:9092"]) == 2
    err = capsys.readouterr().err
    assert "--connect, --catalog-uri, --source-host, --source-database, --source-user" in err
    assert not (tmp_path / "cdc.yaml").exists()


def test_init_asks_on_a_terminal_for_what_the_options_leave_out(tmp_path, monkeypatch, capsys):
    answers = iter(["k:9092", "", "http://connect:8083", "", "sqlite", "", "db", "", "app", "repl", "", "", "APP_PW"])
    asked = []

    def typed(question):
        asked.append(question)
        return next(answers)

    monkeypatch.setattr(init.prompt, "interactive", lambda: True)
    monkeypatch.setattr("builtins.input", typed)
    out = tmp_path / "cdc.yaml"
    assert main(["init", "--output", str(out)]) == 0
    assert next(answers, None) is None and asked[0].startswith("Kafka bootstrap servers")
    monkeypatch.setenv("APP_PW", "x")
    settings = load_settings(out)
    assert (settings.kafka_bootstrap, settings.catalog.type, settings.sources["app"].host) == ("k:9092", "sqlite", "db")
    assert yaml.safe_load(out.read_text())["sources"]["app"]["password"] == "${APP_PW}"


def test_init_quotes_what_yaml_would_read_otherwise():
    for value in ("1:30", "yes", "a: b", "x # y", "null", "'q'", "plain-host.example", "10.0.0.1"):
        assert yaml.safe_load(f"v: {init.scalar(value)}")["v"] == value
