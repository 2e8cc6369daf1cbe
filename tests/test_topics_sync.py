"""topics/: specs load, name real models, and the committed JSON Schemas match what the models generate."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kai_stream.core.events import DeadLetter, dumps
from kai_stream.topics import TOPICS_DIR, drifted_schemas, load_specs, main, write_schemas


def test_every_topic_has_a_spec_keyed_by_pool() -> None:
    specs = load_specs()
    assert [s.name for s in specs] == ["bind-results", "cluster-events", "dead-letter", "decisions"]
    assert all(s.key == "pool" for s in specs)
    for spec in specs:
        assert (TOPICS_DIR / spec.schema_file).is_file()


def test_committed_schemas_match_the_models() -> None:
    drifted = drifted_schemas()
    assert drifted == [], f"regenerate with: python -m kai_stream.topics --write ({drifted})"
    assert main(["--check"]) == 0


def test_schemas_describe_the_event_types() -> None:
    decisions = json.loads((TOPICS_DIR / "schemas" / "decisions.schema.json").read_text())
    assert {"BindRequested", "EvictionRequested", "PodPending", "PodPipelined"} <= set(decisions["$defs"])
    dead = json.loads((TOPICS_DIR / "schemas" / "dead-letter.schema.json").read_text())
    letter = DeadLetter.from_raw(topic="t", partition=1, offset=2, key=b"k", value=b"\x00bad", reason="r", ts=3.0)
    assert set(json.loads(dumps(letter))) == set(dead["properties"])
    assert letter.raw_value() == b"\x00bad"


def test_drift_is_detected_and_rewritten(tmp_path: Path) -> None:
    shutil.copytree(TOPICS_DIR, tmp_path / "topics")
    directory = tmp_path / "topics"
    target = directory / "schemas" / "bind-results.schema.json"
    target.write_text("{}\n")
    assert drifted_schemas(directory) == [target]
    assert main(["--check", "--dir", str(directory)]) == 1
    assert write_schemas(directory) == [target]
    assert drifted_schemas(directory) == []


def test_bad_spec_names_the_file_and_field(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("name: x\nkey: pool\npartitions: 0\nretention_ms: -1\nschema: s\nmodel: m:M\n")
    with pytest.raises(ValueError, match=r"(?s)bad\.yaml.*partitions"):
        load_specs(tmp_path)
