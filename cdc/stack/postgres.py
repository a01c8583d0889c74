"""PostgreSQL from the Debian packages, in its own cluster under the state directory,
with wal_level=logical for Debezium's pgoutput plugin."""
from __future__ import annotations

import glob
import os
import secrets
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote

import psycopg

from cdc.errors import StackError
from cdc.stack.process import Process, require_free_port

SUPERUSER = "cdc"
DATABASE = "cdc"


def server_bin_dir() -> Path:
    """The newest installed PostgreSQL server's bin directory."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("postgres")
    if found:
        return Path(found).parent
    raise StackError("the PostgreSQL server is not installed",
                     hint="run `make setup` (it installs the Debian package postgresql) or apt-get install postgresql")


class Postgres:
    def __init__(self, state_dir: Path, port: int, timeout_s: int):
        self.dir = state_dir / "postgres"
        self.data = self.dir / "data"
        self.socket_dir = self.dir / "run"
        self.password_file = self.dir / "password"
        self.port = port
        self.timeout_s = timeout_s
        self.process = Process("postgres", state_dir / "run")

    # Running as root: the server refuses root, so it runs as the packages' postgres user.
    def _as_server_user(self, argv: list[str]) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--", *argv]
        return argv

    def _chown(self, path: Path) -> None:
        if os.geteuid() == 0:
            shutil.chown(path, "postgres", "postgres")

    def password(self) -> str:
        return self.password_file.read_text().strip()

    def dsn(self, database: str = DATABASE) -> str:
        """A libpq URI for the superuser that holds no password: libpq reads it from a
        password file of the state directory (`passfile`), written here."""
        passfile = self.dir / "pgpass"
        if not passfile.exists():
            escaped = self.password().replace("\\", "\\\\").replace(":", "\\:")
            passfile.touch(mode=0o600)
            passfile.write_text(f"*:*:*:{SUPERUSER}:{escaped}\n")
        return (f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"
                f"?passfile={quote(str(passfile.resolve()), safe='/')}")

    def connect(self, database: str = DATABASE, **kw) -> psycopg.Connection:
        """A superuser connection, its password given: a PGPASSWORD set in the shell, which
        libpq prefers to the password file, does not get in the way."""
        return psycopg.connect(self.dsn(database), password=self.password(), **kw)

    def healthy(self) -> bool:
        try:
            with self.connect("postgres", connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except (psycopg.Error, FileNotFoundError):
            return False

    def init(self) -> None:
        if (self.data / "PG_VERSION").exists():
            return
        bindir = server_bin_dir()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        self._chown(self.socket_dir)
        if not self.password_file.exists():
            self.password_file.write_text(secrets.token_urlsafe(24))
        self.password_file.chmod(0o600)
        pwfile = self.dir / "initdb.pw"
        shutil.copy(self.password_file, pwfile)
        self._chown(pwfile)
        self.data.mkdir(exist_ok=True)
        self._chown(self.data)
        try:
            out = subprocess.run(self._as_server_user([
                str(bindir / "initdb"), "-D", str(self.data), "-U", SUPERUSER, f"--pwfile={pwfile}",
                "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8"]),
                capture_output=True, text=True)
        finally:
            pwfile.unlink(missing_ok=True)
        if out.returncode != 0:
            shutil.rmtree(self.data, ignore_errors=True)
            raise StackError(f"initdb failed (exit {out.returncode}):\n{out.stdout[-1500:]}{out.stderr[-1500:]}")

    def start(self) -> None:
        if self.process.pid() is not None:  # running already, or still starting
            self.process.wait_healthy(self.healthy, self.timeout_s)
            self._ensure_database()
            return
        require_free_port(self.port, "PostgreSQL", "postgres_port")
        self.init()
        bindir = server_bin_dir()
        self.process.start(self._as_server_user([
            str(bindir / "postgres"), "-D", str(self.data),
            "-c", f"port={self.port}", "-c", "listen_addresses=127.0.0.1",
            "-c", f"unix_socket_directories={self.socket_dir}",
            "-c", "wal_level=logical", "-c", "max_replication_slots=20", "-c", "max_wal_senders=20",
            "-c", "max_connections=100", "-c", "shared_buffers=128MB"]))
        self.process.wait_healthy(self.healthy, self.timeout_s)
        self._ensure_database()

    def _ensure_database(self) -> None:
        """The stack's database, created when missing (also by a `stack up` that finds the
        server running, after one that stopped before creating it)."""
        with self.connect("postgres", autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{DATABASE}"')

    def stop(self) -> None:
        if self.process.pid() is None:
            self.process.pid_file.unlink(missing_ok=True)
            return
        subprocess.run(self._as_server_user([str(server_bin_dir() / "pg_ctl"), "stop", "-D", str(self.data),
                                             "-m", "fast", "-w", "-t", "60"]), capture_output=True)
        self.process.stop()
