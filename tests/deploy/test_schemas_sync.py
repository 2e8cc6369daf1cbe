"""The CRD schemas scenario loading validates against (``kai_stream.core.schemas``) are the ones the chart ships:
the chart's CRD template, with its one schema helper expanded and its other template lines dropped, gives the
same ``openAPIV3Schema`` per kind (descriptions aside)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from kai_stream.core.schemas import SCHEMAS

from .chart import CHART

HELPER = re.compile(r'define "kai-stream.queueResourceSchema" -}}\n(.*?)\{\{- end -}}', re.S)


def _without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


def _chart_crds() -> list[dict[str, Any]]:
    text = (CHART / "templates" / "crds.yaml").read_text()
    match = HELPER.search(text)
    assert match is not None
    helper = match.group(1).strip("\n").splitlines()
    lines: list[str] = []
    for line in text.splitlines():
        if 'include "kai-stream.queueResourceSchema"' in line:
            lines += [" " * 24 + part for part in helper]
        elif not line.strip().startswith("{{"):
            lines.append(line)
    body = "\n".join(lines)
    return [doc for doc in yaml.safe_load_all(body[body.index("---") :]) if doc]


def test_vendored_crd_schemas_equal_the_charts() -> None:
    crds = _chart_crds()
    assert len(crds) == 3
    for crd in crds:
        spec = crd["spec"]
        for version in spec["versions"]:
            key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
            assert key in SCHEMAS, key
            assert SCHEMAS[key] == _without_descriptions(version["schema"]["openAPIV3Schema"]), key
