"""MariaDB from the Debian packages, in its own data directory under the state directory,
with the row-based binary log and GTIDs that Debezium's MariaDB connector reads."""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pymysql

from cdc.errors import StackError
from cdc.stack.process import Process, require_free_port

USER = "cdc"
DATABASE = "cdc"
SERVER = Path("/usr/sbin/mariadbd")
INSTALL_DB = "mariadb-install-db"


def _require_server() -> None:
    if not SERVER.exists() or shutil.which(INSTALL_DB) is None:
        raise StackError("the MariaDB server is not installed",
                         hint="run `make setup` (it installs the Debian package mariadb-server), or remove "
                              "stack.mariadb_port from cdc.yaml to run without MariaDB")


class MariaDB:
    def __init__(self, state_dir: Path, port: int, timeout_s: int):
        self.dir = state_dir / "mariadb"
        self.data = self.dir / "data"
        self.socket = self.dir / "run" / "mariadb.sock"
        self.password_file = self.dir / "password"
        self.port = port
        self.timeout_s = timeout_s
        self.process = Process("mariadb", state_dir / "run")

    def _chown(self, path: Path) -> None:
        if os.geteuid() == 0:
            shutil.chown(path, "mysql", "mysql")

    def password(self) -> str:
        return self.password_file.read_text().strip()

    def _admin(self) -> pymysql.Connection:
        """The server's root account, over the local socket (unix_socket authentication)."""
        return pymysql.connect(unix_socket=str(self.socket), user="root", autocommit=True, connect_timeout=2)

    def healthy(self) -> bool:
        try:
            with pymysql.connect(host="127.0.0.1", port=self.port, user=USER, password=self.password(),
                                 database=DATABASE, connect_timeout=2) as conn, conn.cursor() as cur:
                cur.execute("SELECT 1")
            return True
        except (pymysql.MySQLError, FileNotFoundError):
            return False

    def _socket_up(self) -> bool:
        try:
            self._admin().close()
            return True
        except pymysql.MySQLError:
            return False

    def init(self) -> None:
        if (self.data / "mysql").is_dir():
            return
        _require_server()
        for d in (self.dir, self.data, self.socket.parent):
            d.mkdir(parents=True, exist_ok=True)
            self._chown(d)
        if not self.password_file.exists():
            self.password_file.write_text(secrets.token_urlsafe(24))
        self.password_file.chmod(0o600)
        user = ["--user=mysql"] if os.geteuid() == 0 else []
        out = subprocess.run([INSTALL_DB, "--no-defaults", *user, f"--datadir={self.data}", "--auth-root-authentication-method=socket",
                              "--skip-test-db"], capture_output=True, text=True)
        if out.returncode != 0:
            shutil.rmtree(self.data, ignore_errors=True)
            raise StackError(f"mariadb-install-db failed (exit {out.returncode}):\n{out.stdout[-1500:]}{out.stderr[-1500:]}")

    def start(self) -> None:
        if self.process.pid() is not None:  # running already, or still starting
            self.process.wait_healthy(self.healthy, self.timeout_s)
            return
        require_free_port(self.port, "MariaDB", "mariadb_port")
        self.init()
        user = ["--user=mysql"] if os.geteuid() == 0 else []
        self.process.start([
            str(SERVER), "--no-defaults", *user, f"--datadir={self.data}", f"--socket={self.socket}",
            f"--pid-file={self.dir / 'run' / 'mariadb.pid'}", f"--port={self.port}", "--bind-address=127.0.0.1",
            # What Debezium reads: the full row image of every change in the row-based binary log.
            "--server-id=1", f"--log-bin={self.data / 'binlog'}", "--binlog-format=ROW", "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL", "--log-slave-updates", "--expire-logs-days=7",
            "--default-time-zone=+00:00", "--character-set-server=utf8mb4", "--collation-server=utf8mb4_bin",
            "--innodb-buffer-pool-size=128M", "--max-connections=200", "--skip-name-resolve"])
        self.process.wait_healthy(self._socket_up, self.timeout_s)
        self._provision()
        self.process.wait_healthy(self.healthy, self.timeout_s)

    def _provision(self) -> None:
        """The `cdc` account (password from the state directory) and database, once. The
        account's statements stay out of the binary log, which would hold its password."""
        with self._admin() as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            for host in ("127.0.0.1", "localhost"):
                cur.execute(f"CREATE USER IF NOT EXISTS '{USER}'@'{host}' IDENTIFIED BY %s", (self.password(),))
                cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'{host}' WITH GRANT OPTION")
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{DATABASE}`")

    def stop(self) -> None:
        self.process.stop(timeout_s=60)
