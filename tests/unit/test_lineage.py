"""OpenLineage events of a registered table (cdc/lineage): the graph source table -> topic ->
target, the masked and excluded columns and the key's fingerprint, as a lineage server reads
them (JSON), and their transports (a file, HTTP with a bearer key) as cdc.yaml sets them."""
from __future__ import annotations

import datetime as dt
import http.server
import json
import threading

import pytest
from openlineage.client.serde import Serde

from cdc.config.models import Settings
from cdc.lineage import events
from cdc.lineage.emit import Lineage

AT = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
RUN = "0194f0e4-7c1e-7a51-9d7d-6d8b2f0b9c10"


def flow(**changes) -> events.Flow:
    values = dict(
        table="shop.people",
        source=events.place_of_source("postgresql", "db.example", 5432, "app", "shop", "people"),
        topic=events.place_of_topic("broker-1:9092,broker-2:9092", "pg.shop.people"),
        target=events.place_of_location("s3://lake/warehouse/shop/people"),
        target_alias=events.Place("iceberg://lake", "shop.people"),
        columns=(("id", "int4"), ("name", "text"), ("email", "text")),
        masked=("email",), excluded=("ssn",), mask_fingerprint="0123456789abcdef", masked_in_connector=True)
    return events.Flow(**{**values, **changes})


def as_json(event) -> dict:
    return json.loads(Serde.to_json(event))


def test_datasets_are_named_as_openlineage_names_them():
    assert events.place_of_source("postgresql", "h", 5432, "app", "shop", "t") == events.Place(
        "postgres://h:5432", "app.shop.t")
    assert events.place_of_source("mariadb", "h", 3306, "app", "shop", "t") == events.Place("mysql://h:3306", "shop.t")
    assert events.place_of_topic("SASL_SSL://b1:9094, b2:9094", "pg.shop.t") == events.Place("kafka://b1:9094",
                                                                                            "pg.shop.t")
    assert events.place_of_location("s3://lake/wh/shop/t/") == events.Place("s3://lake", "wh/shop/t")
    assert events.place_of_location("/var/lake/shop/t") == events.Place("file", "/var/lake/shop/t")
    assert events.place_of_location("file:///var/lake/shop/t") == events.Place("file", "/var/lake/shop/t")


def test_registration_is_the_capture_of_the_source_table_into_its_topic():
    e = as_json(events.captured("prod", flow(), RUN, AT))
    assert (e["eventType"], e["run"]["runId"]) == ("COMPLETE", RUN)
    assert e["job"]["namespace"] == "prod" and e["job"]["name"] == "capture.shop.people"
    assert e["job"]["facets"]["jobType"]["integration"] == "DEBEZIUM"
    assert [(d["namespace"], d["name"]) for d in e["inputs"]] == [("postgres://db.example:5432", "app.shop.people")]
    [topic] = e["outputs"]
    assert (topic["namespace"], topic["name"]) == ("kafka://broker-1:9092", "pg.shop.people")
    facets = topic["facets"]
    assert [f["name"] for f in facets["schema"]["fields"]] == ["id", "name", "email"]  # ssn is never captured
    assert facets["cdc_protection"]["masked"] == ["email"] and facets["cdc_protection"]["excluded"] == ["ssn"]
    assert facets["cdc_protection"]["maskKeyFingerprint"] == "0123456789abcdef"
    assert facets["cdc_protection"]["_schemaURL"] == events.PROTECTION_SCHEMA
    email = facets["columnLineage"]["fields"]["email"]["inputFields"][0]
    assert (email["namespace"], email["name"], email["field"]) == ("postgres://db.example:5432", "app.shop.people",
                                                                   "email")
    assert email["transformations"][0]["masking"] is True  # the connector hashes it
    assert facets["columnLineage"]["fields"]["name"]["inputFields"][0]["transformations"][0]["subtype"] == "IDENTITY"


def test_a_run_applies_the_topic_to_the_target_and_says_where_masking_happens():
    start = as_json(events.applied("prod", flow(), RUN, AT, "START"))
    assert start["eventType"] == "START" and start["job"]["name"] == "apply.shop.people"
    assert start["inputs"][0]["name"] == "pg.shop.people"
    [target] = start["outputs"]
    assert (target["namespace"], target["name"]) == ("s3://lake", "warehouse/shop/people")
    assert target["facets"]["symlinks"]["identifiers"] == [
        {"namespace": "iceberg://lake", "name": "shop.people", "type": "TABLE"}]
    hashed = target["facets"]["columnLineage"]["fields"]["email"]["inputFields"][0]["transformations"][0]
    assert hashed["subtype"] == "IDENTITY" and hashed["masking"] is False  # hashed before Kafka already
    assert target["facets"]["cdc_protection"]["masked"] == ["email"]


def test_where_the_job_hashes_the_topic_holds_clear_values_and_the_apply_step_masks():
    plain = flow(masked_in_connector=False)
    topic = as_json(events.captured("prod", plain, RUN, AT))["outputs"][0]["facets"]
    step = topic["columnLineage"]["fields"]["email"]["inputFields"][0]["transformations"][0]
    assert (step["subtype"], step["masking"]) == ("IDENTITY", False)
    assert topic["cdc_protection"]["masked"] == [] and topic["cdc_protection"]["excluded"] == ["ssn"]
    target = as_json(events.applied("prod", plain, RUN, AT, "COMPLETE"))["outputs"][0]["facets"]
    step = target["columnLineage"]["fields"]["email"]["inputFields"][0]["transformations"][0]
    assert step["subtype"] == "TRANSFORMATION" and step["masking"] is True and "0123456789abcdef" in \
        step["description"]
    assert target["cdc_protection"]["masked"] == ["email"]


def test_a_failed_run_carries_its_error():
    failed = as_json(events.applied("prod", flow(), RUN, AT, "FAIL", error="target gone"))
    assert failed["eventType"] == "FAIL" and failed["run"]["facets"]["errorMessage"]["message"] == "target gone"


def test_lineage_is_off_by_default_and_a_transport_needs_its_destination():
    assert not Lineage(Settings()).enabled and Lineage(Settings()).send([object()]) == 0
    with pytest.raises(ValueError, match="transport file needs `file`"):
        Settings(lineage={"transport": "file"})
    with pytest.raises(ValueError, match="transport http needs `url`"):
        Settings(lineage={"transport": "http"})
    with pytest.raises(ValueError, match="is not an http"):
        Settings(lineage={"transport": "http", "url": "marquez:5000"})


def test_events_are_appended_to_the_file_one_a_line(tmp_path):
    settings = Settings(root=tmp_path, lineage={"transport": "file", "file": "lineage/events.ndjson"})
    lineage = Lineage(settings)
    assert lineage.send([events.captured("cdc", flow(), RUN, AT)]) == 1
    assert lineage.send([events.applied("cdc", flow(), RUN, AT, s) for s in ("START", "COMPLETE")]) == 2
    lines = (tmp_path / "lineage" / "events.ndjson").read_text().splitlines()
    assert [json.loads(line)["eventType"] for line in lines] == ["COMPLETE", "START", "COMPLETE"]


def test_events_are_posted_with_the_bearer_key_from_the_environment(tmp_path, monkeypatch):
    received = []

    class Server(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, self.headers["Authorization"], json.loads(body)))
            self.send_response(201)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("LINEAGE_KEY", "s3cret")
        from cdc.config.loader import load_settings

        (tmp_path / "cdc.yaml").write_text(
            "lineage:\n  transport: http\n"
            f"  url: http://127.0.0.1:{server.server_port}\n  api_key: ${{LINEAGE_KEY}}\n  namespace: prod\n")
        lineage = Lineage(load_settings(tmp_path / "cdc.yaml"))
        assert lineage.namespace == "prod"
        assert lineage.send([events.captured("prod", flow(), RUN, AT)]) == 1
    finally:
        server.shutdown()
    [(path, auth, body)] = received
    assert path == "/api/v1/lineage" and auth == "Bearer s3cret" and body["job"]["name"] == "capture.shop.people"


def test_an_unreachable_server_is_a_warning_and_replication_goes_on(tmp_path, capsys):
    settings = Settings(lineage={"transport": "http", "url": "http://127.0.0.1:9", "timeout_s": 1,
                                 "api_key": "s3cret"})
    assert Lineage(settings).send([events.captured("cdc", flow(), RUN, AT)] * 2) == 0
    err = capsys.readouterr().err
    assert "lineage: 2 event(s) not sent to http://127.0.0.1:9" in err and "s3cret" not in err


def test_cdcs_own_facet_fits_the_schema_the_docs_ship():
    import jsonschema

    from tests.conftest import ROOT

    schema = json.loads((ROOT / "docs/schema/lineage-protection.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == events.PROTECTION_SCHEMA
    facet = as_json(events.captured("cdc", flow(), RUN, AT))["outputs"][0]["facets"]["cdc_protection"]
    jsonschema.validate(facet, schema["allOf"][1])


def test_a_run_starts_each_table_and_ends_it_completed_or_failed_with_its_error(tmp_path):
    from cdc.register.lineage import RunLineage

    settings = Settings(root=tmp_path, lineage={"transport": "file", "file": "events.ndjson"})
    runs = RunLineage(settings, [], read=lambda settings, tables: {n: flow(table=n) for n in ("shop.a", "shop.b")})
    runs.started()
    runs.ended({"shop.b": "target gone"})
    sent = [json.loads(line) for line in (tmp_path / "events.ndjson").read_text().splitlines()]
    a, b = runs.runs["shop.a"], runs.runs["shop.b"]
    assert [(e["job"]["name"], e["eventType"], e["run"]["runId"]) for e in sent] == [
        ("apply.shop.a", "START", a), ("apply.shop.b", "START", b),
        ("apply.shop.a", "COMPLETE", a), ("apply.shop.b", "FAIL", b)] and a != b
    assert sent[-1]["run"]["facets"]["errorMessage"]["message"] == "target gone"


def test_a_table_given_up_sends_fail_at_once_and_a_new_start_when_it_runs_again(tmp_path):
    from cdc.config.models import TableRegistration
    from cdc.control import jobstate
    from cdc.register.lineage import RunLineage

    settings = Settings(root=tmp_path, lineage={"transport": "file", "file": "events.ndjson"})
    new = TableRegistration(name="shop.n", source={"schema": "shop", "table": "n"})
    runs = RunLineage(settings, [], read=lambda settings, tables: {
        n: flow(table=n) for n in ({"shop.a", "shop.b"} if not tables else {t.name for t in tables})})
    path = tmp_path / "events.ndjson"

    def sent() -> list[tuple[str, str, str]]:
        done = threading.Event()
        runs._later(done.set)
        done.wait(10)
        return [(e["job"]["name"], e["eventType"], e["run"]["runId"])
                for e in map(json.loads, path.read_text().splitlines())]

    runs.started()
    sent()
    first_b = runs.runs["shop.b"]
    runs.record("shop.b", jobstate.RUNNING)  # its run goes on: nothing sent
    runs.record("shop.b", jobstate.FAILED, "target gone")  # given up, the job going on
    assert sent()[-1] == ("apply.shop.b", "FAIL", first_b)
    assert json.loads(path.read_text().splitlines()[-1])["run"]["facets"]["errorMessage"]["message"] == \
        "target gone"
    runs.record("shop.b", jobstate.FAILED, "target gone")  # failed again before running: one FAIL
    runs.record("shop.b", jobstate.RUNNING, reg=new.model_copy(update={"name": "shop.b"}))  # taken back
    runs.record("shop.n", jobstate.RUNNING, reg=new)  # registered while the job runs
    runs.removed("shop.a")  # registration gone
    runs.ended({})
    got = sent()
    second_b = runs.runs["shop.b"]
    assert second_b != first_b
    assert got[3:] == [("apply.shop.b", "START", second_b), ("apply.shop.n", "START", runs.runs["shop.n"]),
                       ("apply.shop.a", "COMPLETE", runs.runs["shop.a"]),
                       ("apply.shop.b", "COMPLETE", second_b), ("apply.shop.n", "COMPLETE", runs.runs["shop.n"])]


def test_lineage_off_reads_nothing_and_a_lineage_secret_left_unset_stops_no_command(tmp_path, monkeypatch,
                                                                                    capsys):
    from cdc.config.loader import load_settings
    from cdc.register.lineage import RunLineage

    runs = RunLineage(Settings(), [], read=lambda settings, tables: pytest.fail("read with lineage off"))
    runs.started()
    runs.ended({})
    monkeypatch.delenv("LINEAGE_KEY", raising=False)
    (tmp_path / "cdc.yaml").write_text("lineage:\n  transport: http\n  url: http://127.0.0.1:9\n"
                                       "  api_key: ${LINEAGE_KEY}\n  timeout_s: 1\n")
    settings = load_settings(tmp_path / "cdc.yaml")  # loads: the key is read only when an event is sent
    assert Lineage(settings).send([events.captured("cdc", flow(), RUN, AT)]) == 0
    assert "LINEAGE_KEY" in capsys.readouterr().err
