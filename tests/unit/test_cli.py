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
