#!/usr/bin/env bash
# Each peer's own virtualenv under .cache/peers/<name>/ (never the project's .venv), and
# the Hudi, Flink and Iceberg Kafka Connect peers' jars (from Maven Central through
# <peer>/pom.xml). Fast the second time: a virtualenv whose stamp is newer than its
# requirements, and jars whose stamp is newer than their pom, are left as they are.
#   bash bench/systems/setup.sh [deltars] [hudi] [flink] [iceberg_connect]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3.11}"
peers=("$@")
[ ${#peers[@]} -gt 0 ] || peers=(deltars hudi flink iceberg_connect)

venv() {
  local name="$1" dir="$root/.cache/peers/$1"
  if [ -f "$dir/.stamp" ] && [ "$dir/.stamp" -nt "$here/$name/requirements.txt" ]; then return; fi
  mkdir -p "$dir"
  [ -x "$dir/venv/bin/python" ] || "$python" -m venv "$dir/venv"
  "$dir/venv/bin/python" -m pip install -q --upgrade pip
  "$dir/venv/bin/python" -m pip install -q -r "$here/$name/requirements.txt"
  touch "$dir/.stamp"
}

for peer in "${peers[@]}"; do
  venv "$peer"
  if [ -f "$here/$peer/pom.xml" ]; then
    jars="$root/.cache/peers/$peer/jars"
    if ! [ -f "$jars/.stamp" ] || [ "$here/$peer/pom.xml" -nt "$jars/.stamp" ]; then
      rm -rf "$jars"
      mvn -B -q -s "$root/jvm/settings.xml" -f "$here/$peer/pom.xml" -Dpeer.jars="$jars" package
      touch "$jars/.stamp"
    fi
  fi
done
