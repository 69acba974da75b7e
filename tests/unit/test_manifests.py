"""deploy/*.yaml validate against the Kubernetes schema (kubernetes-validate ships it: no
network), strictly (an unknown field is an error); a broken manifest is caught."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from adloader.config import config_from

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
VERSION = "1.35.0"  # in-place pod resize (the resize subresource) is stable from 1.35
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))


def _docs(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_there_are_manifests():
    assert {p.name for p in MANIFESTS} >= {"daemonset.yaml", "training-job.yaml"}


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_is_valid_kubernetes(path):
    for doc in _docs(path):
        kubernetes_validate.validate(doc, VERSION, strict=True)


def test_a_broken_manifest_is_refused():
    job = _docs(DEPLOY / "training-job.yaml")[0]
    job["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []  # misspelt field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, VERSION, strict=True)
    job = _docs(DEPLOY / "training-job.yaml")[0]
    job["spec"]["backoffLimit"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, VERSION, strict=True)


def test_the_daemonsets_config_is_settings_the_daemon_takes_and_resizes_cpu_in_place():
    import tomllib

    docs = {d["kind"]: d for d in _docs(DEPLOY / "daemonset.yaml")}
    config_from(tomllib.loads(docs["ConfigMap"]["data"]["adloader.toml"]), environ={})
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    daemon = pod["containers"][0]
    assert {"resourceName": "cpu", "restartPolicy": "NotRequired"} in daemon["resizePolicy"]
    # sized for the daemon itself; the node's loading workers are not its own CPU limit
    assert "cpu" not in daemon["resources"]["limits"]
    assert _cores(daemon["resources"]["requests"]["cpu"]) <= 0.5
    env = {e["name"]: e.get("value") for e in daemon["env"]}
    assert config_from({}, environ={"ADLOADER_CAPACITY": env["ADLOADER_CAPACITY"]}
                       ).capacity == 0  # 0: the node's CPUs (no quota to cut them)
    # lands on tainted GPU nodes, and is watched from its start
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in \
        pod["tolerations"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert "127.0.0.1:7070/healthz" in " ".join(daemon[probe]["exec"]["command"])


def _cores(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def test_a_training_pods_shared_memory_is_memory_backed_past_the_64_mib_default():
    pod = _docs(DEPLOY / "training-job.yaml")[0]["spec"]["template"]["spec"]
    [shm] = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"]["medium"] == "Memory"
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/dev/shm"] == "dshm"


def test_a_training_pod_reaches_its_nodes_socket_under_its_own_name():
    job = _docs(DEPLOY / "training-job.yaml")[0]
    pod = job["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["ADLOADER_JOB"]["value"] == "$(POD_NAME)@$(NODE_NAME)"
    # named by its owner, the Job (the label Kubernetes puts on a Job's pods)
    assert env["ADLOADER_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.labels['batch.kubernetes.io/job-name']"
    assert env["ADLOADER_ENDPOINT"]["value"] == "ipc:///run/adloader/control.sock"
    assert 10001 in pod["securityContext"]["supplementalGroups"]
    assert pod["volumes"][0]["hostPath"]["path"] == "/run/adloader"
