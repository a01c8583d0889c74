#!/usr/bin/env bash
# Each peer's own virtualenv under .cache/peers/<name>/ (never the project's .venv), and
# the Hudi peer's jars. Fast the second time: a peer whose stamp is newer than its
# requirements is left as it is.
#   bash bench/systems/setup.sh [deltars] [hudi]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3.11}"
peers=("$@")
[ ${#peers[@]} -gt 0 ] || peers=(deltars hudi)

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
  if [ "$peer" = hudi ]; then
    jars="$root/.cache/peers/hudi/jars"
    if ! [ -f "$jars/.stamp" ] || [ "$here/hudi/pom.xml" -nt "$jars/.stamp" ]; then
      rm -rf "$jars"
      mvn -B -q -s "$root/jvm/settings.xml" -f "$here/hudi/pom.xml" -Dpeer.jars="$jars" package
      touch "$jars/.stamp"
    fi
  fi
done
