import socket

import pytest

from cdc.errors import StackError
from cdc.stack import process
from cdc.stack.process import Process, require_free_port


def test_taken_port_names_the_setting():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(StackError, match=rf"(?s)port {port} is taken.*stack.kafka_port"):
            require_free_port(port, "Kafka", "kafka_port")


def test_missing_java_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nojdk"))
    with pytest.raises(StackError, match="Java is missing"):
        process.java()


def test_a_service_that_dies_at_start_reports_its_log(tmp_path):
    p = Process("failing", tmp_path)
    p.start(["sh", "-c", "echo 'bind failed: boom' ; exit 3"])
    with pytest.raises(StackError, match=r"(?s)failing exited during start-up.*bind failed: boom"):
        p.wait_healthy(lambda: False, timeout_s=30)


def test_stop_of_a_stopped_service_is_harmless(tmp_path):
    assert Process("idle", tmp_path).stop() is False
