"""A reader for the Go composite literals KAI Scheduler's action tests are written in.

``parse_value`` turns ``pkg.Type{Field: value, ...}`` / ``[]T{...}`` / ``map[K]V{...}`` into dicts and lists
(type names dropped), and small expressions (numbers, strings, KAI's priority constants, ``a * b``, pointer
helpers such as ``ptr.To(x)``) into Python values; KAI's subgroup builders and the test helpers of
``TEST_HELPERS`` are run. Anything else raises ``Unsupported`` naming what it met,
so that a test that uses it is listed as not ported rather than half-read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

CONSTANTS: dict[str, Any] = {
    "constants.PriorityTrainNumber": 50,
    "constants.PriorityInteractivePreemptibleNumber": 75,
    "constants.PriorityBuildNumber": 100,
    "constants.PriorityInferenceNumber": 125,
    "commonconstants.DefaultQueuePriority": 100,
    "subgroup_info.RootSubGroupSetName": "",
    "tasks_fake.NodeAffinityKey": "kai.scheduler/type",
    "true": True,
    "false": False,
    "nil": None,
}
POINTER_HELPERS = {
    "ptr.To",
    "pointer.Int",
    "pointer.Int32",
    "pointer.Int64",
    "pointer.Float64",
    "pointer.String",
    "pointer.Bool",
    "test_utils.CreateFloat64Pointer",
    "int64",
    "int32",
    "int",
    "float64",
    "uint64",
    "time.Duration",
}
SUBGROUP = "jobs_fake.DefaultSubGroup"
SUBGROUP_CALLS = ("subgroup_info.NewSubGroupSet", "subgroup_info.NewPodSet")


def _even_topology_nodes(zones: int, spines: int, racks: int, per_rack: int, gpus: int) -> dict[str, Any]:
    """KAI's ``buildEvenlyDistributedTopologyNodes`` (allocateTopology_test.go): node0, node1, ... filled zone by
    zone, spine by spine, rack by rack; spines and racks numbered across the whole cluster from 1."""
    nodes: dict[str, Any] = {}
    for z in range(zones):
        for sp in range(spines):
            for r in range(racks):
                rack = 1 + r + racks * (sp + spines * z)
                for _ in range(per_rack):
                    labels = {"k8s.io/zone": f"zone{z + 1}", "k8s.io/spine": f"spine{1 + sp + spines * z}"}
                    nodes[f"node{len(nodes)}"] = {"GPUs": gpus, "Labels": {**labels, "k8s.io/rack": f"rack{rack}"}}
    return nodes


TEST_HELPERS = {"buildEvenlyDistributedTopologyNodes": _even_topology_nodes}
_TOKEN = re.compile(
    r"\s+|//[^\n]*|/\*.*?\*/|(?P<str>\"(?:\\.|[^\"\\])*\"|`[^`]*`)|(?P<num>\d+\.?\d*(?:[eE][-+]?\d+)?)"
    r"|(?P<id>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)|(?P<op>[{}\[\]():,&*+\-/<>=!.])",
    re.S,
)


class Unsupported(ValueError):
    """A literal holds something this reader does not translate."""


@dataclass(frozen=True)
class Tok:
    kind: str
    text: str


def tokenize(src: str) -> list[Tok]:
    out: list[Tok] = []
    pos = 0
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if m is None:
            raise Unsupported(f"cannot read {src[pos : pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup
        if kind is not None:
            out.append(Tok(kind, m.group(kind)))
    return out


class Parser:
    def __init__(self, toks: list[Tok], pos: int = 0) -> None:
        self.toks = toks
        self.pos = pos

    def peek(self, k: int = 0) -> Tok | None:
        i = self.pos + k
        return self.toks[i] if i < len(self.toks) else None

    def take(self, text: str | None = None) -> Tok:
        tok = self.toks[self.pos]
        if text is not None and tok.text != text:
            raise Unsupported(f"expected {text!r}, got {tok.text!r}")
        self.pos += 1
        return tok

    def _type_then_brace(self) -> bool:
        """Whether a type expression followed by ``{`` starts here; if so, move to the ``{``."""
        i = self.pos
        while i < len(self.toks):
            t = self.toks[i]
            if t.text == "{":
                if i == self.pos:
                    return False
                self.pos = i
                return True
            nxt = self.toks[i + 1].text if i + 1 < len(self.toks) else ""
            if t.kind == "id":
                if not (nxt in ("{", "]") or (t.text == "map" and nxt == "[")):
                    return False
            elif t.text not in ("[", "]", "*", "&"):
                return False
            i += 1
        return False

    def value(self) -> Any:
        tok = self.peek()
        if tok is None:
            raise Unsupported("unexpected end")
        if tok.text == "func":
            return self.subgroup_builder()
        nxt = self.peek(1)
        if tok.text in SUBGROUP_CALLS and nxt is not None and nxt.text == "(":
            return self.subgroup_call()
        if tok.text in TEST_HELPERS and nxt is not None and nxt.text == "(":
            return TEST_HELPERS[tok.text](*self.call_arguments())
        if tok.text == "{":
            return self.composite()
        if (tok.text in ("&", "[", "*") or tok.kind == "id") and self._type_then_brace():
            return self.composite()
        return self.expression()

    def subgroup_call(self) -> dict[str, Any]:
        """``NewSubGroupSet(name, constraint)`` -> ``{"subgroup_set", "topology", "children"}``;
        ``NewPodSet(name, minMember, constraint)`` -> ``{"pod_set", "min", "topology"}``."""
        fn = self.peek().text  # type: ignore[union-attr]
        args = self.call_arguments()
        if fn.endswith("NewSubGroupSet") and len(args) == 2:
            return {"subgroup_set": args[0], "topology": args[1], "children": []}
        if fn.endswith("NewPodSet") and len(args) == 3:
            return {"pod_set": args[0], "min": args[1], "topology": args[2]}
        raise Unsupported(f"call {fn} with {len(args)} arguments")

    def call_arguments(self) -> list[Any]:
        """The arguments of the call at the cursor (its name, then ``(...)``), each read as a value."""
        self.take()
        self.take("(")
        args: list[Any] = []
        while self.peek() is not None and self.peek().text != ")":  # type: ignore[union-attr]
            args.append(self.value())
            if self.peek() is not None and self.peek().text == ",":  # type: ignore[union-attr]
                self.pos += 1
        self.take(")")
        return args

    def subgroup_builder(self) -> dict[str, Any]:
        """A ``func() *subgroup_info.SubGroupSet { x := New...; x.AddPodSet(...); x.AddSubGroup(y); return x }()``
        literal, run: the subgroup tree it returns. Any other function literal is ``Unsupported``."""
        head = [self.take().text for _ in range(5)]
        if head != ["func", "(", ")", "*", "subgroup_info.SubGroupSet"]:
            raise Unsupported("function literal")
        self.take("{")
        names: dict[str, dict[str, Any]] = {}
        result: dict[str, Any] | None = None
        while self.peek() is not None and self.peek().text != "}":  # type: ignore[union-attr]
            tok = self.take()
            if tok.text == "return":
                result = names[self.take().text]
            elif tok.kind == "id" and self.peek() is not None and self.peek().text == ":":  # type: ignore[union-attr]
                self.take(":")
                self.take("=")
                names[tok.text] = self.value()
            elif tok.kind == "id" and tok.text.rsplit(".", 1)[-1] in ("AddPodSet", "AddSubGroup"):
                target = names[tok.text.rsplit(".", 1)[0]]
                self.take("(")
                arg = self.peek()
                child = names[self.take().text] if arg is not None and arg.text in names else self.value()
                self.take(")")
                target["children"].append(child)
            else:
                raise Unsupported(f"function literal statement {tok.text!r}")
        self.take("}")
        self.take("(")
        self.take(")")
        if result is None:
            raise Unsupported("function literal without return")
        return result

    def composite(self) -> Any:
        self.take("{")
        items: list[Any] = []
        keyed: dict[Any, Any] = {}
        while self.peek() is not None and self.peek().text != "}":  # type: ignore[union-attr]
            nxt = self.peek(1)
            tok = self.peek()
            assert tok is not None
            if nxt is not None and nxt.text == ":" and tok.kind in ("id", "str", "num"):
                self.pos += 2
                key = CONSTANTS.get(tok.text, _literal(tok)) if tok.kind == "id" else _literal(tok)
                keyed[key] = self.value()
            else:
                items.append(self.value())
            if self.peek() is not None and self.peek().text == ",":  # type: ignore[union-attr]
                self.pos += 1
        self.take("}")
        if keyed and items:
            raise Unsupported("mixed composite")
        return keyed if keyed or not items else items

    def expression(self) -> Any:
        parts: list[Tok] = []
        depth = 0
        while True:
            tok = self.peek()
            if tok is None:
                break
            if depth == 0 and tok.text in (",", "}", ")"):
                break
            if tok.text in ("(", "[", "{"):
                depth += 1
            elif tok.text in (")", "]", "}"):
                depth -= 1
            parts.append(tok)
            self.pos += 1
        return evaluate(parts)


def _literal(tok: Tok) -> Any:
    if tok.kind == "str":
        return tok.text[1:-1] if tok.text.startswith("`") else bytes(tok.text[1:-1], "utf-8").decode("unicode_escape")
    if tok.kind == "num":
        return float(tok.text) if any(c in tok.text for c in ".eE") else int(tok.text)
    return tok.text


def evaluate(parts: list[Tok]) -> Any:
    """Evaluate a small Go expression: literals, known constants, + - * / and identity wrappers."""
    code: list[str] = []
    i = 0
    while i < len(parts):
        t = parts[i]
        if t.kind == "id" and i + 1 < len(parts) and parts[i + 1].text == "(":
            if t.text == SUBGROUP:
                code.append("__subgroup__")
                i += 1
                continue
            if t.text not in POINTER_HELPERS:
                raise Unsupported(f"call {t.text}")
            i += 1
            continue
        if t.kind == "id":
            if t.text.startswith("pod_status."):
                code.append(repr(t.text.split(".", 1)[1]))
            elif t.text.startswith("time."):
                unit = {"time.Second": 1.0, "time.Minute": 60.0, "time.Hour": 3600.0, "time.Millisecond": 0.001}
                if t.text not in unit:
                    raise Unsupported(t.text)
                code.append(repr(unit[t.text]))
            elif t.text in CONSTANTS:
                code.append(repr(CONSTANTS[t.text]))
            elif t.text.startswith("v1alpha2.Preemptibility") or t.text.startswith("enginev2alpha2.Preemptibility"):
                code.append(repr(t.text.split("Preemptibility", 1)[1]))
            elif t.text.startswith("node_info.MigStrategy"):
                raise Unsupported("MIG")
            else:
                raise Unsupported(f"identifier {t.text}")
        elif t.kind in ("num", "str"):
            code.append(repr(_literal(t)))
        elif t.text in "+-*/()":
            code.append(t.text)
        else:
            raise Unsupported(f"operator {t.text}")
        i += 1
    text = " ".join(code)
    if "__subgroup__" in text:
        inner = text.replace("__subgroup__", "", 1).strip()
        return {"__subgroup_min__": eval(inner, {"__builtins__": {}})}
    try:
        return eval(text, {"__builtins__": {}}) if text else None
    except Exception as exc:
        raise Unsupported(f"expression {text!r}: {exc}") from None
