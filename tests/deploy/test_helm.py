"""deploy/helm/farebox rendered by Helm's own Go SDK and checked against Kubernetes' schemas.

`helm template` and `helm lint` run through helm-python-sdk (Helm v4's Go SDK in a shared
library, no cluster contacted); every manifest is validated strictly by
kubernetes-validate against the published OpenAPI schemas of the oldest Kubernetes the
chart supports and of the newest. The ServiceMonitor is a CRD with no schema there: its
references are checked by hand.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import parse_config
from gateway.drain import BACKSTOP_S
from gateway.pricing import PriceBook
from tests.deploy.tools import CHART, tool

KUBE_VERSIONS = ("1.25.0", None)  # Chart.yaml's kubeVersion floor, and the latest schemas
EVERYTHING_ON: dict[str, Any] = {
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    "config": {"reload": "rollout"},
    "autoscaling": {"enabled": False},
    "redis": {"existingSecret": "farebox-redis"},
    "providerKeys": [{"name": "OPENAI_API_KEY", "existingSecret": "llm", "secretKey": "openai"}],
    "env": {"FAREBOX_LOG_LEVEL": "debug"},
    "podAnnotations": {"team": "platform"},
}


@pytest.fixture(scope="module")
def helm() -> Any:
    return tool("helm_python")


@pytest.fixture(scope="module")
def chart(helm: Any) -> Iterator[Any]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: Any, values: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Render like `helm template fb deploy/helm/farebox`; manifests by kind."""
    out = chart.render(values or {}, name="fb", namespace="prod", is_install=True)
    manifests: dict[str, dict[str, Any]] = {}
    for path, text in out.items():
        if path.endswith(".yaml"):
            for doc in yaml.safe_load_all(text):
                if doc:
                    assert doc["kind"] not in manifests, path
                    manifests[doc["kind"]] = doc
    return manifests


def test_helm_lint_is_clean(helm: Any) -> None:
    report = helm.lint(str(CHART), strict=True)
    assert report["errors"] == [], report
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


def test_values_validate_against_the_schema_and_bad_values_do_not(chart: Any) -> None:
    jsonschema = tool("jsonschema")
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(values, schema)  # the schema file itself, outside Helm too
    chart.validate_schema({})
    for bad in (
        {"config": {"reload": "sometimes"}},
        {"admin": {"existingSecret": ""}},
        {"providerKeys": [{"name": "OPENAI-KEY", "existingSecret": "s", "secretKey": "k"}]},
        {"metrics": {"port": 4000}},  # the metrics port is the API port: keyless API
        {"replicas": 3},  # a typo of replicaCount
    ):
        with pytest.raises(Exception, match="farebox"):
            chart.validate_schema(bad)


@pytest.mark.parametrize("values", [{}, EVERYTHING_ON], ids=["defaults", "everything-on"])
def test_every_manifest_is_valid_kubernetes(chart: Any, values: dict[str, Any]) -> None:
    validate = tool("kubernetes_validate")
    manifests = render(chart, values)
    for version in KUBE_VERSIONS:
        for kind, manifest in manifests.items():
            if kind == "ServiceMonitor":
                continue
            validate.validate(manifest, version or validate.latest_version(), strict=True)
    expected = {"ConfigMap", "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget"}
    expected |= {"ServiceMonitor"} if values else {"HorizontalPodAutoscaler"}
    assert set(manifests) == expected


def test_the_service_monitor_scrapes_the_keyless_metrics_port(chart: Any) -> None:
    manifests = render(chart, EVERYTHING_ON)
    monitor, service = manifests["ServiceMonitor"], manifests["Service"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    ports = {port["name"]: port for port in service["spec"]["ports"]}
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    (container,) = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert int(env["FAREBOX_METRICS_PORT"]["value"]) == ports["metrics"]["port"]


def _container(manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (container,) = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    return container


def test_probes_replicas_and_autoscaling(chart: Any) -> None:
    manifests = render(chart)
    deployment, container = manifests["Deployment"], _container(manifests)
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert "/readyz" in " ".join(container["readinessProbe"]["exec"]["command"])
    # With the HPA on, it owns the replica count: the Deployment leaves it alone.
    assert "replicas" not in deployment["spec"]
    hpa = manifests["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 10)
    assert manifests["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    fixed = render(chart, {"autoscaling": {"enabled": False}, "replicaCount": 4})
    assert fixed["Deployment"]["spec"]["replicas"] == 4


def test_the_pod_outlives_the_drain_of_in_flight_streams(chart: Any) -> None:
    manifests = render(chart)
    spec = manifests["Deployment"]["spec"]["template"]["spec"]
    container = _container(manifests)
    env = {e["name"]: e.get("value") for e in container["env"]}
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    # SIGTERM comes after preStop; the gateway drains FAREBOX_SHUTDOWN_GRACE_S, then
    # uvicorn's backstop; only after all of it may the kubelet send SIGKILL.
    drained = pre_stop + float(env["FAREBOX_SHUTDOWN_GRACE_S"]) + BACKSTOP_S
    assert spec["terminationGracePeriodSeconds"] > drained
    helm = tool("helm_python")
    with pytest.raises(helm.HelmRenderError, match="terminationGracePeriodSeconds"):
        render(chart, {"terminationGracePeriodSeconds": 30})


def test_secrets_are_referenced_never_rendered(chart: Any) -> None:
    manifests = render(chart, EVERYTHING_ON)
    assert "Secret" not in manifests
    env = {e["name"]: e for e in _container(manifests)["env"]}
    for name, secret in [
        ("FAREBOX_ADMIN_KEY", "farebox-admin"),
        ("FAREBOX_DATABASE_URL", "farebox-database"),
        ("FAREBOX_REDIS_URL", "farebox-redis"),
        ("OPENAI_API_KEY", "llm"),
    ]:
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == secret, name
        assert "value" not in env[name]
    # The plain Redis URL of the defaults is a value (no password in it).
    defaults = {e["name"]: e for e in _container(render(chart))["env"]}
    assert defaults["FAREBOX_REDIS_URL"]["value"].startswith("redis://")


def test_the_policy_configmap_is_a_valid_config_mounted_for_reload(chart: Any) -> None:
    manifests = render(chart)
    data = manifests["ConfigMap"]["data"]
    config = parse_config(data["farebox.yaml"], source="values.yaml config.content")
    prices = PriceBook.from_sources(config.prices)
    for alias in config.models:
        prices.price(config.price_key(alias))  # every route is priced
    container = _container(manifests)
    env = {e["name"]: e.get("value") for e in container["env"]}
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    # A directory mount (no subPath): the kubelet swaps it in place and the file watch
    # reloads it (tests/deploy/test_configmap_reload.py); subPath mounts never update.
    assert "subPath" not in mount
    assert Path(env["FAREBOX_CONFIG"]) == Path(mount["mountPath"]) / "farebox.yaml"
    pod = manifests["Deployment"]["spec"]["template"]
    assert "checksum/config" not in pod["metadata"].get("annotations", {})


def test_reload_rollout_restarts_pods_when_the_policy_changes(chart: Any) -> None:
    first = render(chart, {"config": {"reload": "rollout"}})
    changed = render(chart, {"config": {"reload": "rollout", "content": "models: {}\n"}})
    checksum = [
        manifests["Deployment"]["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        for manifests in (first, changed)
    ]
    assert checksum[0] != checksum[1]


def test_the_pod_runs_read_only_as_the_image_user_with_a_writable_data_dir(chart: Any) -> None:
    manifests = render(chart)
    spec = manifests["Deployment"]["spec"]["template"]["spec"]
    container = _container(manifests)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 10001  # the Dockerfile's USER
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes[mounts[env["FAREBOX_DATA_DIR"]]]
    assert "emptyDir" in volumes[mounts["/tmp"]]
    requests = container["resources"]["requests"]
    assert requests["memory"] == "256Mi" and "cpu" not in container["resources"]["limits"]
