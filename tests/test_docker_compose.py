"""Static checks of docker-compose.yaml: no Docker engine is needed (or used).

The file is parsed with PyYAML, which resolves its anchors and ``<<`` merge keys the
same way Compose does; Compose's own ``${VAR:-default}`` interpolation is applied by
the small helper below wherever a check needs the value Compose would see.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from pydantic import BaseModel

from ctpipe.config import Settings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yaml"

AIRFLOW_SERVICES = {
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
}
REQUIRED_SERVICES = AIRFLOW_SERVICES | {"postgres", "ray-head", "mlflow"}
# Top-level entries of the repository that commands may name through the project mount.
CHECKED_REPO_ENTRIES = {"dags", "plugins", "jobs", "pyproject.toml"}

# "$$" (an escaped dollar), "${NAME}", "${NAME:-default}", "${NAME-default}" or "$NAME".
_INTERPOLATION = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_]\w*)(?::?-(?P<default>[^}]*))?\}|(?P<bare>[A-Za-z_]\w*))"
)


def interpolate(text: str) -> str:
    """The string as Compose sees it when no variable is set (defaults apply)."""

    def value(m: re.Match[str]) -> str:
        return "$" if m["escaped"] else (m["default"] or "")

    return _INTERPOLATION.sub(value, text)


def referenced_variables(text: str) -> set[str]:
    return {m["braced"] or m["bare"] for m in _INTERPOLATION.finditer(text) if not m["escaped"]}


def strings(node: Any) -> Iterator[str]:
    """Every string (mapping keys included) anywhere under ``node``."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, val in node.items():
            yield from strings(key)
            yield from strings(val)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: interpolate(str(val)) for key, val in env.items()}


def mounts(service: dict) -> list[tuple[str, str]]:
    """(source, target) of each volume entry, short or long syntax, interpolated."""
    found = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            found.append((interpolate(str(entry.get("source", ""))), interpolate(entry["target"])))
        else:
            source, target = interpolate(entry).split(":")[:2]
            found.append((source, target))
    return found


def is_bind(source: str) -> bool:
    return source.startswith((".", "/", "~"))


def project_mounts(service: dict) -> list[str]:
    """Container paths where this service mounts the repository root."""
    return [target for source, target in mounts(service) if is_bind(source) and (ROOT / source).resolve() == ROOT]


def dependencies(service: dict) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def pinned_version(distribution: str) -> Requirement:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    groups = [pyproject["project"]["dependencies"], *pyproject["project"]["optional-dependencies"].values()]
    for spec in (Requirement(s) for group in groups for s in group):
        if spec.name == distribution:
            return spec
    raise AssertionError(f"{distribution} is not a dependency in pyproject.toml")


def image_tag(service: dict) -> str:
    image = service["image"]
    assert ":" in image and "${" not in image, f"{image}: pin an explicit tag"
    return image.rsplit(":", 1)[1]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict) -> dict[str, dict]:
    return compose["services"]


def test_required_services_and_local_executor(services: dict) -> None:
    assert REQUIRED_SERVICES <= services.keys()
    assert not {"redis", "airflow-worker", "flower"} & services.keys(), "LocalExecutor needs no broker or workers"
    for name in AIRFLOW_SERVICES:
        assert environment(services[name])["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor", name
    assert services["airflow-apiserver"]["command"][-1] == "api-server"
    assert any(str(p).endswith(":8080") for p in services["airflow-apiserver"]["ports"])


def test_anchors_and_merge_keys_are_resolved(compose: dict, services: dict) -> None:
    assert "<<" not in set(strings(compose)), "a merge key survived parsing"
    common = compose["x-airflow-common"]
    for name in AIRFLOW_SERVICES:
        service = services[name]
        assert service["image"] == common["image"], name
        assert service["volumes"] == common["volumes"], name
        env = environment(service)
        # Nested merges: the common environment itself merges the shared ctpipe settings.
        assert env["CTPIPE_HOME"] == environment(common)["CTPIPE_HOME"], name
        assert "postgres" in dependencies(service), name
    init_env = environment(services["airflow-init"])
    assert init_env["_AIRFLOW_DB_MIGRATE"] == "true" and "AIRFLOW__CORE__DAGS_FOLDER" in init_env


def test_bind_mount_sources_exist_and_named_volumes_are_declared(compose: dict, services: dict) -> None:
    declared = set(compose.get("volumes") or {})
    binds = []
    for name, service in services.items():
        for source, _target in mounts(service):
            if is_bind(source):
                binds.append(source)
                assert (ROOT / source).exists(), f"{name} mounts {source}, missing in the repository"
            else:
                assert source in declared, f"{name} uses undeclared volume {source}"
    assert binds, "no service mounts the project"


def test_ctpipe_variables_are_settings_fields(compose: dict) -> None:
    names = set()
    for service in compose["services"].values():
        names |= set(environment(service))
    for text in strings(compose):
        names |= referenced_variables(text)
    ctpipe_names = sorted(n for n in names if n.startswith("CTPIPE_"))
    assert {"CTPIPE_HOME", "CTPIPE_RAY_ADDRESS", "CTPIPE_MLFLOW_TRACKING_URI"} <= set(ctpipe_names)
    for name in ctpipe_names:
        model: type[BaseModel] = Settings
        parts = name.removeprefix("CTPIPE_").lower().split("__")
        for depth, part in enumerate(parts):
            assert part in model.model_fields, f"{name}: {part!r} is not a field of {model.__name__}"
            if depth < len(parts) - 1:
                model = model.model_fields[part].annotation
                assert isinstance(model, type) and issubclass(model, BaseModel), f"{name}: {part!r} is not a section"


def test_repo_paths_named_in_commands_exist(services: dict) -> None:
    checked = set()
    for name, service in services.items():
        texts = [
            interpolate(s)
            for key in ("command", "entrypoint", "healthcheck", "working_dir", "environment")
            for s in strings(service.get(key))
        ]
        for target in project_mounts(service):
            pattern = re.compile(re.escape(target.rstrip("/")) + r"/([\w.\-/]+)")
            for text in texts:
                for rel in pattern.findall(text):
                    rel = rel.rstrip("/.")
                    if rel.split("/")[0] in CHECKED_REPO_ENTRIES:
                        checked.add(rel)
                        assert (ROOT / rel).exists(), f"{name} names {target}/{rel}, missing in the repository"
    assert {"dags", "plugins"} <= checked


def test_images_match_pyproject_pins(services: dict) -> None:
    python = Version("3.11")
    requires_python = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert SpecifierSet(requires_python).contains(python)

    airflow = pinned_version("apache-airflow")
    (airflow_pin,) = [s.version for s in airflow.specifier if s.operator == "=="]
    for name in AIRFLOW_SERVICES:
        assert services[name]["image"].startswith("apache/airflow:"), name
        assert image_tag(services[name]) == f"{airflow_pin}-python{python}", name

    ray = pinned_version("ray")
    assert "default" in ray.extras
    (ray_pin,) = [s.version for s in ray.specifier if s.operator == "=="]
    assert services["ray-head"]["image"].startswith("rayproject/ray:")
    assert image_tag(services["ray-head"]) == f"{ray_pin}-py{python.major}{python.minor}-cpu"

    mlflow_version = Version(image_tag(services["mlflow"]).removeprefix("v"))
    assert pinned_version("mlflow").specifier.contains(mlflow_version)


def test_depends_on_refers_to_defined_services_without_cycles(services: dict) -> None:
    allowed = {"service_started", "service_healthy", "service_completed_successfully"}
    for name, service in services.items():
        for dep, condition in dependencies(service).items():
            assert dep in services and dep != name, f"{name} depends on unknown service {dep}"
            assert condition in allowed, f"{name} -> {dep}: {condition}"
            if condition == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy, it has no healthcheck"

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"depends_on cycle: {' -> '.join((*path, name))}"
        for dep in dependencies(services[name]):
            visit(dep, (*path, name))

    for name in services:
        visit(name, ())


def test_airflow_folders_point_into_the_project_mount(services: dict) -> None:
    for name in AIRFLOW_SERVICES:
        service = services[name]
        env = environment(service)
        (project,) = project_mounts(service)
        for key, repo_dir in (("AIRFLOW__CORE__DAGS_FOLDER", "dags"), ("AIRFLOW__CORE__PLUGINS_FOLDER", "plugins")):
            folder = env[key]
            assert folder == f"{project}/{repo_dir}", f"{name}: {key}={folder}"
            assert (ROOT / repo_dir).is_dir()
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"].lower() == "false", name


def test_ctpipe_home_and_urls_are_shared_with_ray(services: dict) -> None:
    users = sorted(AIRFLOW_SERVICES | {"ray-head"})
    homes = {environment(services[n])["CTPIPE_HOME"] for n in users}
    assert len(homes) == 1
    (home,) = homes
    volumes = {source for n in users for source, target in mounts(services[n]) if target == home}
    assert len(volumes) == 1 and not is_bind(next(iter(volumes))), "CTPIPE_HOME must be one shared named volume"

    env = environment(services["airflow-scheduler"])
    ray_url = urlsplit(env["CTPIPE_RAY_ADDRESS"])
    assert ray_url.hostname == "ray-head"
    assert "--dashboard-host=0.0.0.0" in services["ray-head"]["command"]
    assert any(str(p).endswith(f":{ray_url.port}") for p in services["ray-head"]["ports"])
    mlflow_url = urlsplit(env["CTPIPE_MLFLOW_TRACKING_URI"])
    assert mlflow_url.hostname == "mlflow"
    assert f"--port={mlflow_url.port}" in services["mlflow"]["command"]
    assert "--serve-artifacts" in services["mlflow"]["command"]
