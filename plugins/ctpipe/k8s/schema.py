"""Validating the custom resources we send against the CRD schemas of the pinned operator versions.

No API server runs where the tests do, so the check the API server would make with
``fieldValidation=Strict`` happens here: each CRD's ``openAPIV3Schema`` becomes a JSON
Schema in which every object with declared properties rejects unknown ones, and each
object we render is validated against it before it is printed or sent.

The schemas live in ``k8s/schemas/<group>_<plural>_<version>.json``, generated from the
upstream CRD files (``python -m ctpipe.k8s.schema <crd.yaml>...``; ``SOURCES.md`` there
names each file's origin and checksum). Descriptions are dropped to keep them small.
CEL rules (``x-kubernetes-validations``) and rules only an operator or webhook enforces
are not JSON Schema: the renderer checks the ones that concern us itself.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

from ctpipe.config import PROJECT_ROOT
from ctpipe.errors import PipelineError

SCHEMA_DIR = PROJECT_ROOT / "k8s" / "schemas"
# The CRDs declare metadata as a bare object; the API server applies ObjectMeta's rules.
_METADATA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "maxLength": 253},
        "generateName": {"type": "string"},
        "namespace": {"type": "string", "maxLength": 63},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


class InvalidManifest(PipelineError):
    """A rendered object that the API server would reject."""


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if k != "description"}
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def schemas_from_crd(crd: dict) -> dict[str, dict]:
    """A strict JSON Schema of the storage version of ``crd`` (the one we render), keyed by file name."""
    group, kind, plural = crd["spec"]["group"], crd["spec"]["names"]["kind"], crd["spec"]["names"]["plural"]
    out = {}
    for v in crd["spec"]["versions"]:
        if not v.get("storage"):
            continue
        schema = _strict(v["schema"]["openAPIV3Schema"])
        schema["properties"]["apiVersion"] = {"const": f"{group}/{v['name']}"}
        schema["properties"]["kind"] = {"const": kind}
        schema["properties"]["metadata"] = _METADATA
        schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind", "metadata"})
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        out[f"{group}_{plural}_{v['name']}.json"] = schema
    return out


@cache
def _validator(api_version: str, kind: str):
    from jsonschema import Draft202012Validator

    group, _, version = api_version.rpartition("/")
    for path in SCHEMA_DIR.glob(f"{group}_*_{version}.json"):
        schema = json.loads(path.read_text())
        if schema["properties"]["kind"]["const"] == kind:
            return Draft202012Validator(schema)
    raise InvalidManifest(f"no schema for {kind} {api_version} under {SCHEMA_DIR}; is the operator version pinned?")


def _path(error) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".") or "(root)"


def validate(obj: dict) -> None:
    """Raise ``InvalidManifest`` naming every field of ``obj`` its CRD schema rejects."""
    validator = _validator(obj.get("apiVersion", ""), obj.get("kind", ""))
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        name = (obj.get("metadata") or {}).get("name", "?")
        detail = "; ".join(f"{_path(e)}: {e.message}" for e in errors[:10])
        raise InvalidManifest(f"{obj['kind']} {name!r} is invalid: {detail}")


def main(crd_files: list[str]) -> None:
    import yaml

    SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
    for f in crd_files:
        for name, schema in schemas_from_crd(yaml.load(Path(f).read_text(), Loader=yaml.CSafeLoader)).items():
            (SCHEMA_DIR / name).write_text(json.dumps(schema, separators=(",", ":"), sort_keys=True))
            print(f"{f} -> {SCHEMA_DIR / name}")


if __name__ == "__main__":
    main(sys.argv[1:])
