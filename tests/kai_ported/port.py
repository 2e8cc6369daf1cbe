"""Port KAI Scheduler's reclaim, preempt, consolidation and topology allocate tests into ``cases/*.json``.

Run by hand against a KAI checkout (a git dir): ``python -m tests.kai_ported.port GIT_DIR [COMMIT]``. Every
``test_utils.TestTopologyBasic`` literal of the listed test files becomes one case: its literal fields as
data (``goliteral``), the file, the Go function it sits in and the test's ``Name``. A literal this reader
cannot translate (MIG strategies, DRA objects, node builders written as functions) is written to the
file's ``not_ported`` list with the reason. The tests read only the JSON; KAI is not needed to run them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.kai_ported.goliteral import Parser, Unsupported, tokenize

OUT = Path(__file__).parent / "cases"
FILES = re.compile(
    r"pkg/scheduler/actions/(reclaim|preempt|consolidation)/[^/]+_test\.go"
    r"|pkg/scheduler/actions/integration_tests/(reclaim|preempt|consolidation|consolidation_and_reclaim|deletion_tests|stalegangeviction)/[^/]+_test\.go"
    r"|pkg/scheduler/actions/allocate/allocateTopology_test\.go"
    r"|pkg/scheduler/actions/integration_tests/allocate/allocate_topology_test\.go"
)
EXTRA_KEYS = ("RoundsUntilMatch", "RoundsAfterMatch", "SchedulingDuration")


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "-C", git_dir, *args], check=True, capture_output=True, text=True).stdout


def _function_at(src: str, offset: int) -> str:
    names = [m for m in re.finditer(r"^func\s+(?:\([^)]*\)\s*)?(\w+)", src[:offset], re.M)]
    return names[-1].group(1) if names else ""


def _name_of(src: str) -> str:
    m = re.search(r'\bName:\s*"((?:\\.|[^"\\])*)"', src)
    return m.group(1) if m else ""


def _inexpressible(topology: dict[str, Any]) -> str:
    """Why a parsed test cannot run on the project (empty when it can)."""
    if topology.get("TestDRAObjects"):
        return "DRA ResourceClaim/ResourceSlice objects: the project has no DRA model"
    for job in topology.get("Jobs") or []:
        for task in job.get("Tasks") or []:
            if task.get("ResourceClaimNames") or task.get("ResourceClaimTemplates"):
                return "DRA resource claims on pods: the project has no DRA model"
            if task.get("PodAffinityLabels"):
                return "pod (anti-)affinity: not modelled by the project"
            if task.get("Priority") is not None:
                return "task order label (kai.scheduler/task-order): not modelled by the project"
        if job.get("RequiredMultiFractionDevicesPerTask"):
            return "multi-device GPU fractions: not modelled by the project"
    for queue in topology.get("Queues") or []:
        if queue.get("UseOnlyFreeCPUResources") or queue.get("V1"):
            return "queue flags UseOnlyFreeCPUResources / V1 queues: not modelled by the project"
    return ""


def cases_of(path: str, src: str) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    kind = "integration" if "/integration_tests/" in path else "unit"
    action = path.split("/")[-2]
    cases: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for m in re.finditer(r"test_utils\.TestTopologyBasic\s*\{", src):
        brace = m.end() - 1
        depth, i = 0, brace
        while True:
            c = src[i]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            elif c in '"`':
                close = src.index(c, i + 1) if c == "`" else re.compile(r'(?<!\\)"').search(src, i + 1).start()  # type: ignore[union-attr]
                i = close
            i += 1
        body = src[brace : i + 1]
        tail = src[i + 1 : i + 400]
        head = src[max(0, m.start() - 300) : m.start()]
        head = head[head.rfind("{") + 1 :]
        name = _name_of(body)
        function = _function_at(src, m.start())
        extra: dict[str, Any] = {}
        for key in EXTRA_KEYS:
            km = re.match(r"\s*,\s*(?:\w+:\s*[^,\n]+,\s*)*?" + key + r":\s*([^,\n}]+)", tail)
            hm = re.search(key + r":\s*([^,\n}]+),", head)
            if km:
                extra[key] = km.group(1).strip()
            elif hm:
                extra[key] = hm.group(1).strip()
        try:
            topology = Parser(tokenize(body)).value()
            for key, raw in list(extra.items()):
                extra[key] = Parser(tokenize(raw)).expression()
        except Unsupported as exc:
            skipped.append({"function": function, "name": name, "reason": f"literal not expressible: {exc}"})
            continue
        reason = _inexpressible(topology)
        if reason:
            skipped.append({"function": function, "name": name, "reason": reason})
            continue
        cases.append(
            {
                "function": function,
                "name": name,
                "kind": kind,
                "action": action,
                "topology": topology,
                **{k.lower(): v for k, v in extra.items()},
            }
        )
    return cases, skipped


def main(git_dir: str, commit: str = "HEAD") -> None:
    OUT.mkdir(exist_ok=True)
    paths = [p for p in git(git_dir, "ls-tree", "-r", "--name-only", commit).splitlines() if FILES.fullmatch(p)]
    sha = git(git_dir, "rev-parse", commit).strip()
    lines = [
        "# KAI tests not ported",
        "",
        f"Written by `python -m tests.kai_ported.port` from NVIDIA/KAI-Scheduler@{sha[:7]}: every test literal of",
        "KAI's reclaim, preempt, consolidation and topology allocate tests (unit and integration) not in `cases/`,",
        "and why.",
        "",
    ]
    for path in paths:
        src = git(git_dir, "show", f"{commit}:{path}")
        cases, skipped = cases_of(path, src)
        doc = {"source": f"NVIDIA/KAI-Scheduler@{sha[:7]}:{path}", "cases": cases, "not_ported": skipped}
        target = OUT / (path.removeprefix("pkg/scheduler/actions/").replace("/", "__").removesuffix(".go") + ".json")
        target.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"{path}: {len(cases)} cases, {len(skipped)} not expressible")
        for s in skipped:
            lines.append(f'- `{path}` {s["function"]} "{s["name"]}": {s["reason"]}')
    (OUT.parent / "NOT_PORTED.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
