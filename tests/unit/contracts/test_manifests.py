"""deploy/*.yaml validate against the Kubernetes schema (kubernetes-validate ships it: no
network), strictly (an unknown field is an error); a broken manifest is caught. The
PodMonitor validates against the Prometheus Operator's CRD schema, kept with its source in
``data/`` (``monitoring.coreos.com_podmonitors.yaml`` and its ``.source``), as strictly.
The daemon's metrics listener and the PodMonitor meet: same port, same Secret, no host
network."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import jsonschema  # kubernetes-validate's own validator (it depends on it)
import kubernetes_validate
import pytest
import yaml

from adloader import env
from adloader.config import DaemonConfig, config_from

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
VERSION = "1.35.0"  # in-place pod resize (the resize subresource) is stable from 1.35
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))
CRD = Path(__file__).resolve().parent / "data" / "monitoring.coreos.com_podmonitors.yaml"
OPERATOR = "monitoring.coreos.com/"  # the Prometheus Operator's API group: its CRDs' schemas


def _docs(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_there_are_manifests():
    assert {p.name for p in MANIFESTS} >= {"daemonset.yaml", "training-job.yaml",
                                           "podmonitor.yaml"}


def _strict(schema):
    """The CRD's structural schema with unknown fields refused, as the API server's strict
    field validation (kubectl's default) refuses them: every object that lists its
    properties and takes no others says so (``additionalProperties: false``)."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def _crd_validator() -> jsonschema.Draft4Validator:
    """The PodMonitor CRD's served version's ``openAPIV3Schema`` (OpenAPI 3.0's schema
    objects: draft 4's keywords), strict."""
    crd = yaml.safe_load(CRD.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["served"] and v["storage"]]
    assert crd["spec"]["names"]["kind"] == "PodMonitor" and version["name"] == "v1"
    assert "x-kubernetes-validations" not in str(version)  # no CEL rules left unchecked here
    schema = _strict(version["schema"]["openAPIV3Schema"])
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def _validate(doc: dict) -> None:
    """A Kubernetes object against its schema: the Prometheus Operator's CRD for its kinds
    (the object's metadata as ObjectMeta, through a ConfigMap), Kubernetes' for the rest."""
    if doc["apiVersion"].startswith(OPERATOR):
        assert (doc["apiVersion"], doc["kind"]) == (OPERATOR + "v1", "PodMonitor")
        _crd_validator().validate(doc)
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap",
                                      "metadata": doc["metadata"]}, VERSION, strict=True)
    else:
        kubernetes_validate.validate(doc, VERSION, strict=True)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_is_valid_kubernetes(path):
    for doc in _docs(path):
        _validate(doc)


def test_the_crd_is_the_one_its_source_names():
    source = dict(line.split(": ", 1) for line in
                  CRD.with_name(CRD.name + ".source").read_text().splitlines()
                  if line and not line.startswith("#"))
    assert hashlib.sha256(CRD.read_bytes()).hexdigest() == source["sha256"]
    tag = source["tag"]
    assert source["url"] == ("https://github.com/prometheus-operator/prometheus-operator/blob/"
                             f"{tag}/{source['path']}")
    crd = yaml.safe_load(CRD.read_text())
    assert "v" + crd["metadata"]["annotations"]["operator.prometheus.io/version"] == tag


def _podmonitor() -> dict:
    return _docs(DEPLOY / "podmonitor.yaml")[0]


@pytest.mark.parametrize(("broken", "why"), [
    (lambda pm: pm["spec"].pop("selector"), "'selector' is a required property"),
    (lambda pm: pm["spec"].update(podMetricEndpoints=pm["spec"].pop("podMetricsEndpoints")),
     "'podMetricEndpoints' was unexpected"),  # misspelt: an unknown field
    (lambda pm: pm["spec"].update(podMetricsEndpoints=pm["spec"]["podMetricsEndpoints"][0]),
     "is not of type 'array'"),
    (lambda pm: pm["spec"]["podMetricsEndpoints"][0].update(portNumber="9464"),
     "'9464' is not of type 'integer'"),
    (lambda pm: pm["spec"]["podMetricsEndpoints"][0].update(scheme="tcp"),
     "'tcp' is not one of"),
    (lambda pm: pm["spec"]["podMetricsEndpoints"][0].update(interval="30 seconds"),
     "does not match"),
    (lambda pm: pm["spec"]["podMetricsEndpoints"][0]["authorization"]["credentials"].pop(
        "key"), "'key' is a required property"),
    (lambda pm: pm["spec"]["podMetricsEndpoints"][0].update(
        bearerTokenSecret={"name": "adloader-metrics-token"}), "'key' is a required property"),
], ids=["no selector", "misspelt endpoints", "endpoints not a list", "port a string",
        "unknown scheme", "bad interval", "secret without key", "old field half given"])
def test_a_broken_podmonitor_is_refused(broken, why):
    pm = copy.deepcopy(_podmonitor())
    broken(pm)
    with pytest.raises(jsonschema.ValidationError, match=why):
        _validate(pm)


def test_the_podmonitor_scrapes_the_daemons_metrics_listener_with_its_secret(tmp_path):
    pm = _podmonitor()
    docs = {d["kind"]: d for d in _docs(DEPLOY / "daemonset.yaml")}
    daemonset = docs["DaemonSet"]
    pod = daemonset["spec"]["template"]
    assert pm["metadata"]["namespace"] == daemonset["metadata"]["namespace"]  # its Secret too
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [endpoint] = pm["spec"]["podMetricsEndpoints"]
    daemon = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in daemon["ports"]}
    settings = {e["name"]: e for e in daemon["env"]}
    config = config_from({}, environ={k: e["value"] for k, e in settings.items() if "value" in e})
    assert config.metrics_listen == f"0.0.0.0:{ports[endpoint['port']]}"
    assert endpoint["path"] == "/metrics" and endpoint["scheme"] == "http"
    # Prometheus and the daemon read the one Secret: the key is the file the daemon reads
    credentials = endpoint["authorization"]["credentials"]
    assert endpoint["authorization"]["type"] == "Bearer"
    mounts = {m["name"]: m["mountPath"] for m in daemon["volumeMounts"]}
    [volume] = [v for v in pod["spec"]["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == credentials["name"]
    assert f"{mounts[volume['name']]}/{credentials['key']}" == config.metrics_token_file
    # readable by the daemon's group only (ensure_token refuses a token others may read)
    assert volume["secret"]["defaultMode"] == 0o440
    assert pod["spec"]["securityContext"]["fsGroup"] == 10001


def test_the_daemon_pod_has_its_own_network_and_would_refuse_the_hosts(tmp_path):
    from adloader.daemon.api.metrics_listener import refusal

    pod = {d["kind"]: d for d in _docs(DEPLOY / "daemonset.yaml")}["DaemonSet"]["spec"][
        "template"]["spec"]
    assert pod["hostNetwork"] is False and "dnsPolicy" not in pod
    daemon = pod["containers"][0]
    settings = {e["name"]: e for e in daemon["env"]}
    assert settings[env.POD_IP]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert settings[env.HOST_IP]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    token = tmp_path / "token"
    token.write_text("t\n")
    config = DaemonConfig(metrics_listen=settings[env.setting("metrics_listen")]["value"],
                          metrics_token_file=str(token))
    own = {env.POD_IP: "10.244.3.17", env.HOST_IP: "192.168.1.20"}
    assert refusal(config, own) is None
    host = {env.POD_IP: "192.168.1.20", env.HOST_IP: "192.168.1.20"}  # with hostNetwork
    assert "uses its node's network" in refusal(config, host)
    # the probes and REST stay on the pod's loopback
    assert settings[env.setting("host")]["value"] == "127.0.0.1"


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
