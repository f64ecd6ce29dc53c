"""The embedded Airflow: ``airflow standalone`` on SQLite, and a small client of its REST API v2."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from ctpipe.config import PROJECT_ROOT, Settings
from ctpipe.processes import running_pid

USER = "admin"
DAG_IDS = ("trace_to_dataset", "train", "eval_and_deploy", "dataset_retention")


def _jwt_secret(airflow_home: Path) -> str:
    """One signing key for all components: tasks' execution-API tokens must verify in the API server."""
    path = airflow_home / "jwt_secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def airflow_env(s: Settings) -> dict[str, str]:
    """Environment for every Airflow process of the embedded install."""
    url = f"http://127.0.0.1:{s.airflow_port}"
    return {
        "AIRFLOW__API_AUTH__JWT_SECRET": _jwt_secret(s.airflow_home),
        "AIRFLOW_HOME": str(s.airflow_home),
        # Scheduler, API server, DAG processor and triggerer all write to one SQLite file: wait for
        # the lock rather than fail after pysqlite's default 5 s (the file is also put in WAL mode).
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{s.airflow_home / 'airflow.db'}?timeout=60",
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        "AIRFLOW__API__PORT": str(s.airflow_port),
        "AIRFLOW__API__BASE_URL": url,
        # Two cores: more concurrent task processes only thrash.
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "True",
        # standalone runs its components as `airflow ...` subprocesses: this venv's bin must come first.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "CTPIPE_HOME": str(s.home),
        "TOKENIZERS_PARALLELISM": "false",
        "NO_PROXY": "*",
    }


class ServerError(RuntimeError):
    """An HTTP 5xx (usually a transient database lock on SQLite), or a call of any method but POST that
    timed out: retried."""


def init_sqlite(path: Path) -> None:
    """Create the metadata database in WAL mode, which lets readers and one writer work at once."""
    import sqlite3

    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")


class AirflowClient:
    """Just the REST calls the pipeline's command line needs, authenticated as the local admin."""

    timeout_s = 30  # of one request

    def __init__(self, base_url: str, password_file: Path):
        self.base = base_url.rstrip("/")
        self.password_file = password_file
        self.session = requests.Session()
        self._token: str | None = None

    def login(self) -> None:
        password = json.loads(self.password_file.read_text())[USER]
        r = requests.post(f"{self.base}/auth/token", json={"username": USER, "password": password}, timeout=self.timeout_s)
        r.raise_for_status()
        self._token = r.json()["access_token"]
        self.session.headers["Authorization"] = f"Bearer {self._token}"

    def token(self) -> str:
        """The admin's JWT, as the UI keeps it in its ``_token`` cookie."""
        if self._token is None:
            self.login()
        return self._token

    def call_once(self, method: str, path: str, **kwargs) -> Any:
        try:
            if self._token is None:
                self.login()
            r = self.session.request(method, f"{self.base}/api/v2{path}", timeout=self.timeout_s, **kwargs)
            if r.status_code == 401:  # the token expired
                self.login()
                r = self.session.request(method, f"{self.base}/api/v2{path}", timeout=self.timeout_s, **kwargs)
        except requests.Timeout as e:
            # An API server just started on two busy cores can take longer than that: a call that
            # changes nothing if sent twice is retried as a 5xx is; a POST may have gone through.
            if method == "POST":
                raise
            raise ServerError(f"{method} {path} timed out: {e}") from e
        if r.status_code >= 500:
            raise ServerError(f"{method} {path} -> HTTP {r.status_code}: {r.text[:500]}")
        if not r.ok:
            raise RuntimeError(f"{method} {path} -> HTTP {r.status_code}: {r.text[:500]}")
        return r.json() if r.content else None

    @retry(
        retry=retry_if_exception_type((requests.ConnectionError, ServerError)),
        wait=wait_exponential(max=10),
        stop=stop_after_attempt(6),
        reraise=True,
    )
    def call(self, method: str, path: str, **kwargs) -> Any:
        return self.call_once(method, path, **kwargs)

    def healthy(self) -> bool:
        try:
            h = requests.get(f"{self.base}/api/v2/monitor/health", timeout=5).json()
        except (requests.RequestException, ValueError):
            return False
        parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
        return all((h.get(p) or {}).get("status") == "healthy" for p in parts)

    def dag_run(self, dag_id: str, run_id: str) -> dict:
        return self.call("GET", f"/dags/{dag_id}/dagRuns/{requests.utils.quote(run_id, safe='')}")

    def dag_runs(self, dag_id: str, limit: int = 25) -> list[dict]:
        return self.call("GET", f"/dags/{dag_id}/dagRuns", params={"order_by": "-run_after", "limit": limit})["dag_runs"]

    def upstream_events(self, dag_id: str, run_id: str) -> list[dict]:
        rid = requests.utils.quote(run_id, safe="")
        # No retry: the caller polls, and Airflow 3.3 answers 500 here until the run has started.
        return self.call_once("GET", f"/dags/{dag_id}/dagRuns/{rid}/upstreamAssetEvents")["asset_events"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        rid = requests.utils.quote(run_id, safe="")
        return self.call("GET", f"/dags/{dag_id}/dagRuns/{rid}/taskInstances")["task_instances"]

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        rid = requests.utils.quote(run_id, safe="")
        entry = self.call(
            "GET", f"/dags/{dag_id}/dagRuns/{rid}/taskInstances/{task_id}/xcomEntries/return_value",
            params={"deserialize": "true", "stringify": "false"},
        )
        return entry["value"]


class LocalAirflow:
    """``airflow standalone`` for one ctpipe home: started once, left running for the UI."""

    def __init__(self, s: Settings):
        self.s = s
        self.home = s.airflow_home
        self.url = f"http://127.0.0.1:{s.airflow_port}"
        self.pid_file = self.home / "standalone.pid"
        self.log_file = self.home / "standalone.log"
        self.client = AirflowClient(self.url, self.home / "simple_auth_manager_passwords.json.generated")

    def running_pid(self) -> int | None:
        return running_pid(self.pid_file)

    def start(self) -> None:
        if self.running_pid() is not None:
            return
        init_sqlite(self.home / "airflow.db")
        airflow = str(Path(sys.executable).with_name("airflow"))
        with open(self.log_file, "ab") as out:
            proc = subprocess.Popen(
                [airflow, "standalone"],
                env=os.environ | airflow_env(self.s),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # outlives this command, so the UI stays up
            )
        self.pid_file.write_text(str(proc.pid))

    def wait_ready(self, timeout_s: float = 600) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.client.healthy():
            if self.running_pid() is None:
                raise RuntimeError(f"airflow standalone exited; see {self.log_file}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"Airflow at {self.url} not healthy after {timeout_s:.0f}s; see {self.log_file}")
            time.sleep(2)
        for dag_id in DAG_IDS:  # parsed and registered by the dag processor
            while True:
                try:
                    self.client.call("GET", f"/dags/{dag_id}")
                    break
                except RuntimeError:
                    if time.monotonic() > deadline:
                        errors = self.client.call("GET", "/importErrors")
                        raise TimeoutError(f"DAG {dag_id} never appeared; import errors: {errors}") from None
                    time.sleep(2)
            self.client.call("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    def stop(self) -> bool:
        pid = self.running_pid()
        if pid is None:
            return False
        os.killpg(pid, signal.SIGTERM)
        for _ in range(60):
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.5)
        else:
            os.killpg(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        return True
