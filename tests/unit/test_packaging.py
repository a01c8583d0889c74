"""A pip-installed cdc carries every file it reads at run time (the connector templates
`register` fills in among them, from debezium/ beside the package), and `debezium_dir`
defaults to those templates.

The wheel's contents come from setuptools' own build step (build_py, which decides what
goes into the wheel) run in process on a clean copy of the sources: building the wheel
through pip fetches the build backend from the package index, which a unit test must not
need."""
from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

from cdc.config import load_settings
from cdc.config.models import CONNECTOR_TEMPLATES, DEBEZIUM, Settings
from cdc.errors import ConfigError
from cdc.register.connector import AVRO_CONVERTER, read_template

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cdc"
SHIPPED = ("connectors/*.json", "connect-worker.properties")  # what debezium/ ships: no Java source


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory) -> set[str]:
    """The paths a wheel built from pyproject.toml holds under cdc/ and debezium/."""
    src = tmp_path_factory.mktemp("src")
    shutil.copytree(PACKAGE, src / "cdc", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(DEBEZIUM, src / "debezium", ignore=shutil.ignore_patterns("target"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src)
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # setuptools' notes on its pyproject.toml support
        mp.chdir(src)
        dist = Distribution({"script_name": "setup.py"})
        apply_configuration(dist, "pyproject.toml")
        build = dist.get_command_obj("build_py")
        build.ensure_finalized()
        return {Path(f).relative_to(build.build_lib).as_posix() for f in build.get_outputs(include_bytecode=False)}


def test_wheel_carries_the_connector_templates(wheel_files):
    templates = {f"debezium/connectors/{name}" for name in
                 ("postgres-connector.json", "mariadb-connector.json", AVRO_CONVERTER)}
    assert {p.relative_to(ROOT).as_posix() for p in CONNECTOR_TEMPLATES.glob("*.json")} == templates
    assert templates | {"debezium/connect-worker.properties"} <= wheel_files
    assert not {f for f in wheel_files if f.startswith("debezium/transforms")}  # the Java source stays home


def test_the_debezium_side_ships_beside_the_package():
    """Found where the repository keeps it and where pip installs it: beside cdc/."""
    assert DEBEZIUM == PACKAGE.parent / "debezium" and CONNECTOR_TEMPLATES == DEBEZIUM / "connectors"
    shipped = {p.relative_to(ROOT).as_posix() for pattern in SHIPPED for p in DEBEZIUM.glob(pattern)}
    assert "debezium/connect-worker.properties" in shipped and (DEBEZIUM / "transforms" / "pom.xml").is_file()


def test_wheel_carries_every_file_of_the_package(wheel_files):
    """Templates, log settings, the sample database: whatever cdc/ holds besides code."""
    data = {f"cdc/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts}
    assert {"cdc/sinks/log4j2.properties", "cdc/stack/templates/kafka-server.properties"} <= data
    assert data - wheel_files == set()


def test_debezium_dir_defaults_to_the_packaged_templates():
    settings = Settings()
    assert settings.debezium_dir is None and settings.connector_templates == CONNECTOR_TEMPLATES
    assert CONNECTOR_TEMPLATES.parent.parent == PACKAGE.parent
    assert read_template(settings, "postgres-connector.json")["connector.class"].startswith("io.debezium.")


def test_debezium_dir_overrides_the_templates(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "postgres-connector.json").write_text('{"connector.class": "custom.Connector"}')
    settings = Settings(root=tmp_path, debezium_dir=Path("mine"))
    assert settings.connector_templates == (tmp_path / "mine").resolve()
    assert read_template(settings, "postgres-connector.json") == {"connector.class": "custom.Connector"}
    with pytest.raises(ConfigError, match="avro-converter.json") as e:
        read_template(settings, AVRO_CONVERTER)
    assert str(CONNECTOR_TEMPLATES) in e.value.hint


def test_missing_debezium_dir_is_a_config_error(tmp_path):
    (tmp_path / "cdc.yaml").write_text("debezium_dir: nowhere\n")
    with pytest.raises(ConfigError, match=r"debezium_dir .*nowhere.* remove the key"):
        load_settings(tmp_path / "cdc.yaml")
