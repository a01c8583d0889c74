# cdc: `make run` (the main job on the local stack) and `make test` (every test tier).
# Each does the whole set-up on a fresh machine and is fast the second time.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
CDC := $(VENV)/bin/cdc
JARS := .cache/jars
MVN := mvn -B -q -s jvm/settings.xml -f jvm/pom.xml -Dcdc.cache=$(CURDIR)/$(JARS)

.PHONY: setup run test test-unit test-long test-spark test-integration differential smoke bench bench-quick bench-peers bench-direct stack-up stack-down docs clean

# cdc's own Java, built from source by the package below: the Connect transformation, the Spark
# helper (jvm/direct, onto spark.jars as spark/cdc-direct.jar) and the benchmark's prototype.
JAVA_SRC := $(shell find debezium/transforms/src/main jvm/direct/src/main jvm/direct-bench/src/main -type f 2>/dev/null)

setup: .cache/system.stamp $(VENV)/.stamp $(JARS)/.stamp
	@$(PY) -m cdc.sinks.archive_classes  # the driver's class archive: built once for these jars and this JDK

.cache/system.stamp: scripts/ensure-system-packages.sh
	@mkdir -p .cache
	bash scripts/ensure-system-packages.sh
	@touch $@

$(VENV)/.stamp: pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "$(PYTHON) not found: set PYTHON=python3.x (3.11+)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench]'
	@touch $@

$(JARS)/.stamp: jvm/pom.xml jvm/spark/pom.xml jvm/kafka/pom.xml jvm/debezium/pom.xml jvm/registry/pom.xml jvm/rest/pom.xml jvm/settings.xml \
		debezium/transforms/pom.xml jvm/direct/pom.xml jvm/direct-bench/pom.xml $(JAVA_SRC)
	rm -rf $(JARS)/spark  # a version no longer pinned must not stay on Spark's classpath
	$(MVN) package -DskipTests  # cdc-direct.jar written into spark/ again with the rest; `make test` runs its tests
	@touch $@

stack-up: setup
	$(CDC) stack up

stack-down:
	$(CDC) stack down

run: stack-up
	$(PY) -m cdc.sample.main

test: stack-up
	$(PY) -m pyflakes cdc tests bench
	$(MVN) -pl :cdc-direct test  # jvm/direct's JUnit tests
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -ra --durations=30 --junitxml=.cache/test-times.xml -m "not long" tests/unit tests/spark tests/integration tests/chaos

# The Delta variants of semantics tests that `make test` leaves to the differential test.
test-long: stack-up
	$(PY) -m pytest -ra -m long tests/spark tests/integration tests/chaos

test-unit: setup
	$(PY) -m pytest -ra tests/unit

# The generated reference under docs/ (tests/unit/test_reference.py holds it current).
docs: $(VENV)/.stamp
	$(PY) -m cdc.config.reference
	$(PY) -m cdc.cli.reference

# The differential test's long run: DIFF_ROUNDS rounds of its seeded workload (CDC_DIFF_SEED=N repeats one).
DIFF_ROUNDS ?= 12
differential: stack-up
	$(PY) -m pytest -ra tests/chaos/test_differential.py --diff-rounds $(DIFF_ROUNDS)

bench: stack-up
	$(PY) -m bench

bench-quick: stack-up
	$(PY) -m bench --quick

# Peer systems (delta-rs, Apache Hudi, Flink SQL into Iceberg and Paimon, Iceberg's Kafka
# Connect sink) end to end on the same Debezium topic, each in its own virtualenv under
# .cache/peers/ (bench/systems/README.md): their throughput on a backlog, on the merge
# workload (a target holding every key, then batches of changes), then their freshness at
# 2,000 changes a second.
bench-peers: stack-up
	$(PY) -m bench.systems --quick
	$(PY) -m bench.systems --quick --merge
	$(PY) -m bench.systems --freshness

# The direct path's prototype against the MERGE on the same changes (bench/direct.py).
bench-direct: setup
	$(PY) -m bench.direct

smoke: stack-up
	$(PY) ../shared/checks/contract_smoke.py

# The generated documents (tests/unit checks each is up to date).
clean:
	-$(CDC) stack down --purge
	rm -rf .cache $(VENV)
