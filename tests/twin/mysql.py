"""Stand-in for Azure Database for MySQL Flexible Server: Debian's MariaDB on the stand-in address, TLS on (Azure
requires secure transport by default: Microsoft Learn, "Connect to Azure Database for MySQL - Flexible Server with
encrypted connections"), the administrator login and database the plan creates."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from tests.twin.machine import die_with_parent


class Database:
    def __init__(self, folder: Path, address: str, cert: Path, key: Path):
        self.folder = folder
        self.address = address
        self.cert = cert
        self.key = key
        self.proc: subprocess.Popen | None = None

    @property
    def socket(self) -> Path:
        return self.folder / "mysqld.sock"

    def start(self, user: str, password: str, database: str = "slurm_acct_db", timeout: float = 120) -> None:
        server = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
        install = shutil.which("mariadb-install-db") or "/usr/bin/mariadb-install-db"
        data = self.folder / "data"
        data.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [install, "--no-defaults", f"--datadir={data}", "--user=root", "--auth-root-authentication-method=socket",
             "--skip-test-db"],
            check=True, capture_output=True, timeout=timeout,
        )  # fmt: skip
        log = (self.folder / "mariadb.log").open("ab")
        self.proc = subprocess.Popen(
            [server, "--no-defaults", f"--datadir={data}", f"--socket={self.socket}", f"--bind-address={self.address}",
             "--port=3306", "--user=root", f"--ssl-cert={self.cert}", f"--ssl-key={self.key}",
             "--require-secure-transport=ON", f"--pid-file={self.folder / 'mysqld.pid'}", "--skip-log-bin",
             "--innodb-buffer-pool-size=64M"],
            stdout=log, stderr=log, start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        sql = (
            f"CREATE DATABASE IF NOT EXISTS {database}; "
            f"CREATE USER IF NOT EXISTS '{user}'@'%' IDENTIFIED BY '{password}'; "
            f"GRANT ALL ON {database}.* TO '{user}'@'%'; FLUSH PRIVILEGES;"
        )
        while True:
            cp = subprocess.run(
                ["mariadb", f"--socket={self.socket}", "-uroot", "-e", sql], capture_output=True, text=True, timeout=60
            )
            if cp.returncode == 0:
                return
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"MariaDB stand-in did not start: {cp.stderr}")
            time.sleep(1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
