"""The chart renders what a platform team needs: scaling rules, CRDs, Kafka security, GPU agent, probes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .chart import EXAMPLE_VALUES, REPO, by_kind, check_crds, load_deploy_module, render, render_text


def _containers(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [
        (doc["metadata"]["labels"]["app.kubernetes.io/component"], doc["spec"]["template"], container)
        for doc in docs
        if doc["kind"] in ("Deployment", "DaemonSet")
        for container in doc["spec"]["template"]["spec"]["containers"]
    ]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def test_processor_runs_one_replica_per_pool_never_more_than_partitions() -> None:
    def replicas(*args: str) -> int:
        value: int = by_kind(render(*args), "Deployment")["kai-stream-processor"]["spec"]["replicas"]
        return value

    assert replicas() == 1
    assert replicas("-f", str(EXAMPLE_VALUES)) == 4
    assert replicas("--set", "nodePools={a,b,c,d,e,f,g,h,i,j}") == 8
    assert replicas("--set", "processor.replicas=3") == 3
    refused = render_text("--set", "processor.replicas=9")
    assert refused.returncode != 0
    assert "must not exceed topics.clusterEventsPartitions (8)" in refused.stderr


def test_crds_are_kai_compatible_and_can_be_skipped() -> None:
    crds = by_kind(render(), "CustomResourceDefinition")
    served = {
        (crd["spec"]["group"], version["name"], crd["spec"]["names"]["kind"], crd["spec"]["scope"])
        for crd in crds.values()
        for version in crd["spec"]["versions"]
    }
    assert served == {
        ("scheduling.run.ai", "v2", "Queue", "Cluster"),
        ("scheduling.run.ai", "v2alpha2", "PodGroup", "Namespaced"),
        ("kai.scheduler", "v1alpha1", "Topology", "Cluster"),
    }
    assert all(crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for crd in crds.values())
    assert by_kind(render("--set", "crds.install=false"), "CustomResourceDefinition") == {}


def test_crds_are_structural_and_accept_kai_manifests(tmp_path: Path) -> None:
    rendered = tmp_path / "chart.yaml"
    rendered.write_text(yaml.safe_dump_all(render()))
    kai_objects = tmp_path / "kai.yaml"
    kai_objects.write_text(
        """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-a}
spec:
  parentQueue: research
  priority: 100
  preemptMinRuntime: 5m
  resources:
    gpu: {quota: 0.5, overQuotaWeight: 2, limit: -1}
    cpu: {quota: -1, overQuotaWeight: 1, limit: -1}
    memory: {quota: -1, overQuotaWeight: 1, limit: -1}
---
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: train-1, namespace: team-a}
spec:
  minMember: 4
  queue: team-a
  priorityClassName: train
  preemptibility: preemptible
  topologyConstraint: {topology: default, requiredTopologyLevel: rack}
  markUnschedulable: true
---
apiVersion: kai.scheduler/v1alpha1
kind: Topology
metadata: {name: default}
spec:
  levels: [{nodeLabel: topology.kubernetes.io/zone}, {nodeLabel: kubernetes.io/hostname}]
---
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: broken, namespace: team-a}
spec:
  minMember: "four"
  preemptibility: sometimes
"""
    )
    examples = sorted((REPO / "examples").glob("**/*.yaml"))
    errors, checked = check_crds.check([rendered], [kai_objects, *examples])
    assert checked >= 4
    assert sorted(errors) == sorted(
        [
            f"{kai_objects}: PodGroup broken.spec.minMember: expected integer, got str 'four'",
            f"{kai_objects}: PodGroup broken.spec.preemptibility: 'sometimes' not one of "
            "['preemptible', 'non-preemptible']",
        ]
    )


def test_default_kafka_is_plaintext_and_example_reads_sasl_ssl_secrets() -> None:
    for _, _, container in _containers(render()):
        assert _env(container)["KAI_STREAM_KAFKA_SECURITY_PROTOCOL"] == "PLAINTEXT"
    for _, template, container in _containers(render("-f", str(EXAMPLE_VALUES))):
        env = _env(container)
        assert env["KAI_STREAM_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
        assert env["KAI_STREAM_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
        assert env["KAI_STREAM_KAFKA_SASL_PASSWORD"] == {"secretKeyRef": {"name": "kai-stream", "key": "password"}}
        assert env["KAI_STREAM_KAFKA_SSL_CAFILE"] == "/etc/kai-stream/kafka-ca/ca.crt"
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert volumes["kafka-ca"]["secret"]["secretName"] == "kai-stream-cluster-ca-cert"
        assert {"name": "kafka-ca", "mountPath": "/etc/kai-stream/kafka-ca", "readOnly": True} in container[
            "volumeMounts"
        ]


def test_sasl_without_a_secret_is_refused_with_a_message() -> None:
    result = render_text("--set", "kafka.sasl.enabled=true", "--set", "kafka.sasl.username=u")
    assert result.returncode != 0
    assert "kafka.sasl.secretName is required with sasl" in result.stderr


def test_every_component_runs_its_command_with_probes_resources_and_scrape_annotations() -> None:
    seen = set()
    for component, template, container in _containers(render()):
        seen.add(component)
        assert container["command"] == ["kai-stream"]
        assert container["args"][0] == component
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        assert {"name": "http", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
        assert _env(container)["KAI_STREAM_HEALTH_PORT"] == "8080"
        assert _env(container)["KAI_STREAM_HEALTH_HOST"] == "0.0.0.0"  # the default is loopback: probes need this
        assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
        annotations = template["metadata"]["annotations"]
        assert annotations == {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": "8080",
            "prometheus.io/path": "/metrics",
        }
    assert seen == {"connector", "processor", "binder", "history-sink", "gpu-agent"}
    connector = by_kind(render("--set", "schedulerName=kai-stream"), "Deployment")["kai-stream-connector"]
    args = connector["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["connector", "--scheduler-name", "kai-stream", "--tick-interval", "1", "--supervise"]


def test_connector_processor_and_binder_run_supervised_unless_turned_off() -> None:
    def supervised(*args: str) -> dict[str, bool]:
        found = {}
        for component, _template, container in _containers(render(*args)):
            if component in ("connector", "processor", "binder"):
                env = _env(container)
                found[component] = "--supervise" in container["args"] or env.get(
                    "KAI_STREAM_PROCESSOR_SUPERVISE") == "true"
        return found

    assert supervised() == {"connector": True, "processor": True, "binder": True}
    off = [arg for c in ("connector", "processor", "binder") for arg in ("--set", f"{c}.supervise=false")]
    assert supervised(*off) == {"connector": False, "processor": False, "binder": False}
    assert supervised("--set", "binder.supervise=false") == {"connector": True, "processor": True, "binder": False}


def test_gpu_agent_runs_on_gpu_nodes_only_and_per_pool_when_asked() -> None:
    (daemonset,) = by_kind(render(), "DaemonSet").values()
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    env = _env(pod["containers"][0])
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["KAI_STREAM_NODE_POOL"] == "default"
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"].get("requests", {})

    per_pool = by_kind(render("-f", str(EXAMPLE_VALUES)), "DaemonSet")
    assert sorted(per_pool) == [
        "kai-stream-gpu-agent-a100-train",
        "kai-stream-gpu-agent-h100-infer",
        "kai-stream-gpu-agent-h100-train",
        "kai-stream-gpu-agent-l40s-dev",
    ]
    for name, daemonset in per_pool.items():
        pool = name.removeprefix("kai-stream-gpu-agent-")
        pod = daemonset["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "kai.scheduler/node-pool": pool}
        assert _env(pod["containers"][0])["KAI_STREAM_NODE_POOL"] == pool
        assert pod["runtimeClassName"] == "nvidia"


def test_disruption_budgets_and_history_volume() -> None:
    docs = render()
    pdbs = by_kind(docs, "PodDisruptionBudget")
    assert {name: pdb["spec"]["maxUnavailable"] for name, pdb in pdbs.items()} == {
        "kai-stream-processor": 1,
        "kai-stream-binder": 1,
    }
    claim = by_kind(docs, "PersistentVolumeClaim")["kai-stream-history-sink"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    sink = by_kind(docs, "Deployment")["kai-stream-history-sink"]["spec"]["template"]["spec"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "kai-stream-history-sink"}} in sink["volumes"]


def test_strimzi_topics_are_generated_from_the_topic_specs() -> None:
    module = load_deploy_module("render_strimzi_topics")
    committed = (REPO / "deploy" / "strimzi" / "topics.yaml").read_text()
    assert committed == module.render(), "run: python deploy/render_strimzi_topics.py"
    topics = {doc["spec"]["topicName"]: doc["spec"] for doc in yaml.safe_load_all(committed) if doc}
    assert set(topics) == {"cluster-events", "decisions", "bind-results", "dead-letter"}
    chart_values = yaml.safe_load((REPO / "deploy" / "helm" / "kai-stream" / "values.yaml").read_text())
    assert topics["cluster-events"]["partitions"] == chart_values["topics"]["clusterEventsPartitions"]


def test_values_schema_rejects_typos_and_bad_choices() -> None:
    typo = render_text("--set", "gpuAgent.layuot=perPool")
    assert typo.returncode != 0 and "additional properties 'layuot' not allowed" in typo.stderr
    bad = render_text("--set", "kafka.sasl.mechanism=MD5")
    assert bad.returncode != 0 and "/kafka/sasl/mechanism" in bad.stderr
