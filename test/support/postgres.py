"""A real PostgreSQL 15 for tests: initdb + pg_ctl in a temporary folder, on 127.0.0.1.

The fleet store is SQL in PostgreSQL with PostGIS and pgvector, so its tests
need the real server, not a stand-in. This module makes a throw-away cluster
(trust authentication, TCP on 127.0.0.1 at a free port, its socket inside its
own folder), hands out fresh databases, can stop and start the server mid-test
(to cut a sync off) and removes everything at the end, also on failure.

initdb refuses to run as root, so under root the cluster belongs to the
``postgres`` user (the Debian packages create it) and its commands run through
``runuser``. Where the binaries, that user or the extensions are missing,
``PostgresUnavailable`` says which, and the fixtures skip with that reason.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

PG_BIN_CANDIDATES = ("/usr/lib/postgresql/15/bin",)
REQUIRED_EXTENSIONS = ("vector", "postgis")
INSTALL_HINT = ("install the Debian packages postgresql-15 and postgresql-15-postgis-3, and pgvector with "
                "`bash ../shared/vendor/install-pgvector.sh` (as root)")


class PostgresUnavailable(RuntimeError):
    """PostgreSQL cannot be started here; the message says why."""


def find_pg_bin() -> Path:
    configured = os.environ.get("EMEM_PG_BIN")
    for folder in ([configured] if configured else []) + list(PG_BIN_CANDIDATES):
        if folder and (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise PostgresUnavailable(f"no PostgreSQL 15 binaries (initdb, pg_ctl) found; {INSTALL_HINT}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One temporary cluster. Use as a context manager, or call start() and destroy()."""

    def __init__(self, bin_dir: Optional[Path] = None, settings: Optional[dict[str, str]] = None,
                 root: Optional[Path] = None) -> None:
        self.bin_dir = bin_dir or find_pg_bin()
        self.settings = dict(settings or {})
        """postgresql.conf lines added after ours (e.g. a benchmark's shared_buffers)."""
        self.port = free_port()
        if root is not None:  # a kept cluster (a benchmark's fixture): started again on a new port
            root.mkdir(parents=True, exist_ok=True)
        self.root = root if root is not None else Path(tempfile.mkdtemp(prefix="emem-pg-"))
        self.data_dir = self.root / "data"
        self.log_file = self.root / "server.log"
        self._run_as: Optional[str] = None
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(self.root, ignore_errors=True)
                raise PostgresUnavailable("running as root and there is no `postgres` user to run initdb as "
                                          f"(initdb refuses root); {INSTALL_HINT}") from None
            os.chown(self.root, user.pw_uid, user.pw_gid)
            os.chmod(self.root, 0o700)
            self._run_as = "postgres"
        self._databases = 0
        self.running = False

    # -- commands ---------------------------------------------------------
    def _command(self, *args: str) -> list[str]:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self._run_as:
            runuser = shutil.which("runuser") or "/usr/sbin/runuser"
            return [runuser, "-u", self._run_as, "--", *command]
        return command

    def _run(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        result = subprocess.run(self._command(*args), capture_output=True, text=True, timeout=timeout,
                                cwd=self.root)
        if result.returncode != 0:
            raise PostgresUnavailable(f"{args[0]} failed ({result.returncode}): "
                                      f"{(result.stderr or result.stdout).strip()[-800:]}")
        return result

    # -- life -------------------------------------------------------------
    def init(self) -> None:
        self._run("initdb", "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--locale=C", "--no-sync", timeout=120.0)
        settings = [
            "listen_addresses = '127.0.0.1'",
            f"port = {self.port}",
            f"unix_socket_directories = '{self.root}'",
            # A test cluster: no fsync (the OS keeps what a killed server wrote), but commits stay synchronous,
            # so a server stopped with "immediate" keeps every transaction it acknowledged.
            "fsync = off", "full_page_writes = off",
            "max_connections = 40", "shared_buffers = 64MB",
            "max_wal_size = 512MB",
        ] + [f"{key} = {value}" for key, value in self.settings.items()]
        with open(self.data_dir / "postgresql.conf", "a", encoding="utf-8") as handle:
            handle.write("\n".join(settings) + "\n")

    def start(self) -> None:
        if not self.data_dir.exists():
            self.init()
        else:  # a kept cluster: it listens on this run's port
            with open(self.data_dir / "postgresql.conf", "a", encoding="utf-8") as handle:
                handle.write(f"port = {self.port}\nunix_socket_directories = '{self.root}'\n")
        self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_file), "-w", "-t", "60", "start",
                  timeout=90.0)
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate`` = like a crash: no shutdown checkpoint)."""
        if not self.running:
            return
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "60", "stop", timeout=90.0)
        self.running = False

    def destroy(self) -> None:
        try:
            if self.running:
                self.stop("immediate")
        except (PostgresUnavailable, subprocess.TimeoutExpired):
            pass
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "PostgresServer":
        try:
            self.start()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    # -- databases --------------------------------------------------------
    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "fleet") -> str:
        """A new empty database; returns its URL."""
        import psycopg

        self._databases += 1
        name = f"{prefix}_{self._databases}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def check_extensions(self) -> None:
        """Raise PostgresUnavailable naming what is missing among pgvector and PostGIS."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            available = {row[0] for row in conn.execute("SELECT name FROM pg_available_extensions")}
        missing = [name for name in REQUIRED_EXTENSIONS if name not in available]
        if missing:
            raise PostgresUnavailable(f"PostgreSQL runs but lacks the extension(s) {', '.join(missing)}; "
                                      f"{INSTALL_HINT}")


def start_server(settings: Optional[dict[str, str]] = None, root: Optional[Path] = None) -> PostgresServer:
    """A started cluster with both extensions available, or PostgresUnavailable saying why.

    With ``root`` the cluster lives there and is kept (stop it, do not destroy it)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise PostgresUnavailable("the Python driver psycopg is not installed (pip install '.[fleet]')") from None
    server = PostgresServer(settings=settings, root=root)
    try:
        server.start()
        server.check_extensions()
    except BaseException:
        if root is None:
            server.destroy()
        else:
            server.stop("fast")
        raise
    return server


def wait_until_down(url: str, timeout: float = 10.0) -> None:
    """Wait until nothing answers at ``url`` (after a stop)."""
    import psycopg

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            psycopg.connect(url, connect_timeout=1).close()
        except psycopg.OperationalError:
            return
        time.sleep(0.05)
    raise AssertionError(f"PostgreSQL at {url} still answers")
