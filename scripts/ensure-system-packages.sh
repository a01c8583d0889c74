#!/usr/bin/env bash
# Installs what cdc needs from Debian's packages when it is missing: a JDK (17+), Maven,
# the PostgreSQL and MariaDB servers and clients. Idempotent; does nothing when all are present.
set -euo pipefail

need=()
# javac too: `make setup` builds cdc's Connect transformation (jvm/transforms) from source
command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
command -v psql >/dev/null 2>&1 || need+=(postgresql-client)
[ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || need+=(mariadb-client)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "installing Debian packages: ${need[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "need root or sudo to install: ${need[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
