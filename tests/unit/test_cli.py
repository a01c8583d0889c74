import re

from cdc.cli.main import main


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
    assert main(["stack", "up", "--purge"]) == 2


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
