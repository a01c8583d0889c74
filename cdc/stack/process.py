"""Background processes with a pid file and a log file, and the checks around them."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from cdc.errors import StackError
from cdc.waiting import poll_until


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return f"(no log at {path})"


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def port_accepts(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require_free_port(port: int, service: str, setting: str) -> None:
    if not port_is_free(port):
        raise StackError(f"cannot start {service}: port {port} is taken by another process",
                         hint=f"stop that process or set stack.{setting} in cdc.yaml to a free port")


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    exe = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not exe or not Path(exe).exists():
        raise StackError("Java is missing: Kafka and Kafka Connect need a JDK 17 or later",
                         hint="install OpenJDK 17 (apt-get install openjdk-17-jdk-headless) or set JAVA_HOME")
    return exe


class Process:
    """A service started in its own session, tracked by a pid file."""

    def __init__(self, name: str, run_dir: Path):
        self.name = name
        self.pid_file = run_dir / f"{name}.pid"
        self.log_file = run_dir / f"{name}.log"

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        # A zombie is not alive; reap it if it is our child.
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
            if state == "Z":
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                return None
        except (FileNotFoundError, IndexError):
            return None
        return pid

    def start(self, argv: list[str], env: dict | None = None, cwd: Path | None = None) -> int:
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True)
        self.pid_file.write_text(str(p.pid))
        return p.pid

    def wait_healthy(self, check: Callable[[], bool], timeout_s: float) -> None:
        """Poll `check` until it passes; fail with the log's tail if the process dies or
        the time runs out."""
        def alive() -> None:
            if self.pid() is None:
                raise StackError(f"{self.name} exited during start-up; last lines of {self.log_file}:\n"
                                 + tail(self.log_file))

        if not poll_until(check, timeout_s, 0.2, between=alive, backoff=1.5):
            raise StackError(f"{self.name} did not become healthy within {timeout_s:.0f}s; "
                             f"last lines of {self.log_file}:\n" + tail(self.log_file),
                             hint="raise stack.start_timeout_s in cdc.yaml if the machine is slow")

    def stop(self, timeout_s: float = 30) -> bool:
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        poll_until(lambda: self.pid() is None, timeout_s, 0.2)
        if self.pid() is not None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.pid_file.unlink(missing_ok=True)
        return True
