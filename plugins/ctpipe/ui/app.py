"""The FastAPI app the Airflow plugin mounts at ``/ctpipe``: the Continuous training page and its DAG-run tab.

Plugin routes are not protected by Airflow, so every route here has Airflow's auth manager
accept the caller's token (the UI's cookie or a bearer token) and reads its data from the
public REST API v2 *as that user*: the API applies the user's permissions, and parts from
DAGs the user may not read are left out. Registry aliases come from MLflow.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import httpx
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from ctpipe.ui import lineage
from ctpipe.ui.charts import line_chart

MOUNT = "/ctpipe"
ASSETS = {"dataset": "ctpipe_training_dataset", "checkpoint": "ctpipe_checkpoint", "evaluation": "ctpipe_evaluation"}
PAGE = 100  # the API's default maximum_page_limit
MAX_EVENTS = 1000  # per asset: the history the page reads

_templates = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=select_autoescape(default=True)
)
_templates.filters["q"] = lambda s: quote(str(s), safe="")


async def _authenticated(request: Request) -> str:
    """The caller's token, once Airflow's auth manager has accepted it (401/403 otherwise)."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.core_api.security import resolve_user_from_token

    # The same precedence as Airflow's get_user: an explicit bearer token, else the UI's cookie.
    header = request.headers.get("authorization", "")
    token = header[7:] if header.lower().startswith("bearer ") else request.cookies.get(COOKIE_NAME_JWT_TOKEN)
    await resolve_user_from_token(token)
    return token


Token = Annotated[str, Depends(_authenticated)]


class AirflowApi:
    """The REST API v2 of this Airflow, called with the page viewer's own token."""

    def __init__(self, token: str):
        self.client = httpx.AsyncClient(base_url=_base_url(), headers={"Authorization": f"Bearer {token}"}, timeout=30)

    async def __aenter__(self) -> AirflowApi:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.client.aclose()

    async def get(self, path: str, **params) -> dict[str, Any] | None:
        r = await self.client.get(path, params=params)
        if r.status_code in (403, 404):
            return None
        r.raise_for_status()
        return r.json()

    async def asset_ids(self) -> dict[str, int]:
        found = await self.get("/api/v2/assets", name_pattern="ctpipe_", limit=PAGE)
        return {a["name"]: a["id"] for a in (found or {}).get("assets", [])}

    async def events(self, asset_id: int) -> list[dict[str, Any]]:
        """The asset's events, newest first: the cached ones plus those the API has since."""
        log = _event_logs.setdefault(asset_id, _EventLog())
        since = {"timestamp_gte": log.newest} if log.newest else {}
        fresh: list[dict[str, Any]] = []
        while len(fresh) < MAX_EVENTS:
            page = await self.get(
                "/api/v2/assets/events", asset_id=asset_id, order_by="-timestamp", limit=PAGE, offset=len(fresh), **since
            )
            if page is None:
                return []  # this user may not read the asset: nothing, cached or not
            fresh += page["asset_events"]
            if len(page["asset_events"]) < PAGE:
                break
        return log.merge(fresh)

    async def active_runs(self, dag_id: str) -> dict[str, str]:
        found = await self.get(f"/api/v2/dags/{dag_id}/dagRuns", state=["queued", "running"], limit=PAGE)
        return {r["dag_run_id"]: r["state"] for r in (found or {}).get("dag_runs", [])}

    async def require_run(self, dag_id: str, run_id: str) -> None:
        """404 unless the DAG run exists and this user may read it."""
        if await self.get(f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}") is None:
            raise HTTPException(404, f"no DAG run {dag_id}/{run_id} you may read")

    async def tasks(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """The run's tasks (``task_id``, ``state``), each with ``why`` it failed on bad input or had
        nothing to do, where it said so (see :data:`ctpipe.airflow.errors.WHY`)."""
        from ctpipe.airflow.errors import WHY

        run = f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}/taskInstances"
        found = (await self.get(run, limit=PAGE) or {}).get("task_instances", [])
        tasks = [{"task_id": t["task_id"], "state": t.get("state")} for t in found if t.get("map_index", -1) == -1]

        async def why(task: dict[str, Any]) -> Any:
            if task["state"] not in ("failed", "skipped"):
                return None
            return (await self.get(f"{run}/{quote(task['task_id'], safe='')}/xcomEntries/{WHY}") or {}).get("value")

        return [t | {"why": w} for t, w in zip(tasks, await asyncio.gather(*map(why, tasks)))]

    async def readable(self) -> set[str]:
        dags = (lineage.DATASET_DAG, lineage.TRAIN_DAG, lineage.EVAL_DAG)
        found = await asyncio.gather(*(self.get(f"/api/v2/dags/{d}") for d in dags))
        return {d for d, f in zip(dags, found) if f is not None}


class _EventLog:
    """Asset events are append-only, so what was read once is kept and only newer ones are asked for.

    Every request still asks the API (as its user) for the newer ones, so access is checked each time.
    """

    def __init__(self) -> None:
        self.by_id: dict[int, dict[str, Any]] = {}
        self.newest: str | None = None

    def merge(self, fresh: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.by_id.update((e["id"], e) for e in fresh)
        events = sorted(self.by_id.values(), key=lambda e: e["timestamp"], reverse=True)[:MAX_EVENTS]
        self.by_id = {e["id"]: e for e in events}
        self.newest = events[0]["timestamp"] if events else None
        return events


_event_logs: dict[int, _EventLog] = {}
_aliases_cache: tuple[float, dict[str, list[str]]] = (0.0, {})


def registry_aliases() -> dict[str, list[str]]:
    """Version -> aliases of the registered model, from MLflow (cached for a few seconds)."""
    global _aliases_cache
    at, aliases = _aliases_cache
    if time.monotonic() - at < 5:
        return aliases
    from ctpipe.config import settings
    from ctpipe.registry import Registry

    try:
        model = Registry(settings()).client.get_registered_model(settings().model_name)
        aliases = {}
        for alias, version in (model.aliases or {}).items():
            aliases.setdefault(str(version), []).append(alias)
    except Exception:  # noqa: BLE001 - no model registered yet, or MLflow unreachable: show none
        aliases = {}
    _aliases_cache = (time.monotonic(), aliases)
    return aliases


def _base_url() -> str:
    from airflow.configuration import conf

    return (conf.get("api", "base_url", fallback="") or f"http://127.0.0.1:{conf.getint('api', 'port', fallback=8080)}").rstrip("/")


async def load_cycles(api: AirflowApi) -> list[lineage.Cycle]:
    ids = await api.asset_ids()

    async def events(name: str) -> list[dict[str, Any]]:
        return await api.events(ids[name]) if name in ids else []

    datasets, checkpoints, evaluations, readable, active = await asyncio.gather(
        *(events(name) for name in ASSETS.values()), api.readable(), api.active_runs(lineage.TRAIN_DAG)
    )
    return lineage.assemble(datasets, checkpoints, evaluations, readable, active)


def accuracy_chart(cycles: list[lineage.Cycle]) -> Any:
    # One point an evaluation, though its run trained on several versions, each a cycle.
    evals = list({c.evaluation["id"]: c.evaluation["extra"] for c in reversed(cycles)
                  if c.evaluation and (c.evaluation.get("extra") or {}).get("comparison")}.values())
    x = list(range(1, len(evals) + 1))
    cmp = [e["comparison"] for e in evals]
    champion = [e["comparison"]["champion_accuracy"] for e in evals]
    candidate = [e["comparison"]["candidate_accuracy"] for e in evals]
    return line_chart(
        "held-out accuracy per evaluation", x, {"champion": champion, "candidate": candidate},
        bands={"champion": [tuple(c.get("champion_ci") or ()) or None for c in cmp],
               "candidate": [tuple(c.get("candidate_ci") or ()) or None for c in cmp]},
        x_label="evaluation", width=640, height=220,
    )


def training_charts(cycle: lineage.Cycle, large: bool = False) -> list[Any]:
    """One chart per training metric (loss and reward differ in scale by orders of magnitude)."""
    curve = ((cycle.checkpoint or {}).get("extra") or {}).get("curve") or {}
    size = {"width": 360, "height": 140} if large else {"width": 180, "height": 80}
    charts = [line_chart(k, curve["step"], {k: v}, x_label="step", **size) for k, v in curve.items() if k != "step"]
    return charts or [line_chart("training", [], {}, **size)]


def render(cycles: list[lineage.Cycle], *, title: str, limit: int, root: str = "", detail: bool = False,
           run: dict[str, Any] | None = None) -> str:
    """The page; ``root`` is Airflow's own path prefix, for links into its UI. ``run``: the DAG run
    (``dag_id``, ``run_id``, ``tasks``) of a run's tab that is in no cycle."""
    return _templates.get_template("cycles.html").render(
        title=title, cycles=cycles[:limit], total=len(cycles), limit=limit, detail=detail, root=root, run=run,
        aliases=registry_aliases(), accuracy=accuracy_chart(cycles), training_charts=training_charts,
    )


def create_app() -> FastAPI:
    app = FastAPI(title="ctpipe", docs_url=None, redoc_url=None, openapi_url=None)

    def root(request: Request) -> str:
        # Mounted at <airflow prefix>/ctpipe: Airflow's pages are one level up.
        return request.scope.get("root_path", "").rstrip("/").removesuffix(MOUNT)

    @app.get("/", response_class=HTMLResponse)
    async def cycles_page(request: Request, token: Token, limit: int = 50) -> str:
        async with AirflowApi(token) as api:
            cycles = await load_cycles(api)
        return render(cycles, title="Continuous training", limit=max(1, min(limit, MAX_EVENTS)), root=root(request))

    @app.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse)
    async def run_tab(request: Request, dag_id: str, run_id: str, token: Token) -> str:
        async with AirflowApi(token) as api:
            await api.require_run(dag_id, run_id)
            cycles = [c for c in await load_cycles(api) if c.involves(dag_id, run_id)]
            run = None if cycles else {"dag_id": dag_id, "run_id": run_id, "tasks": await api.tasks(dag_id, run_id)}
        return render(cycles, title=f"Continuous training: {dag_id} / {run_id}", limit=10, root=root(request),
                      detail=True, run=run)

    @app.get("/mlflow/{dag_id}/{run_id}", response_class=HTMLResponse)
    async def mlflow_run(dag_id: str, run_id: str, token: Token):
        async with AirflowApi(token) as api:
            await api.require_run(dag_id, run_id)
        found = await asyncio.to_thread(_mlflow_run, dag_id, run_id)
        if found is None:
            raise HTTPException(404, f"no MLflow run for {dag_id}/{run_id} yet (it opens when the prepare task runs)")
        if isinstance(found, str):
            return RedirectResponse(found)
        return _templates.get_template("mlflow_run.html").render(title=f"MLflow run: {dag_id} / {run_id}", **found)

    return app


def _mlflow_run(dag_id: str, run_id: str) -> str | dict[str, Any] | None:
    """The MLflow UI's URL of the DAG run's training run, or (no UI configured) what to show of it here."""
    from ctpipe.config import settings
    from ctpipe.registry import Registry

    s = settings()
    registry = Registry(s)
    run = registry.run_for(dag_id, run_id, "train")
    if run is None:
        return None
    if s.mlflow_ui_url:
        return f"{s.mlflow_ui_url.rstrip('/')}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
    history = {k: registry.client.get_metric_history(run.info.run_id, k) for k in run.data.metrics}
    charts = [line_chart(k, [m.step for m in h], {k: [m.value for m in h]}, x_label="step") for k, h in sorted(history.items())]
    return {"run": run, "params": dict(sorted(run.data.params.items())), "charts": charts}
