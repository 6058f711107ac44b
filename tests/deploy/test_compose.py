"""deploy/compose.yaml, validated without a Docker daemon.

`docker compose config` needs the compose plugin, which this machine's Docker client
lacks (and no engine runs here). Instead: the file is interpolated by the Compose rules
for the forms it uses, then parsed by compose-spec (the Rust compose_spec crate, strict:
unknown keys, wrong types and bad durations are refused), and the cross-references the
parser leaves alone are checked here: services, volumes, files, ports, the load balancer
and Prometheus targets, the gateway configuration it mounts.
"""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from gateway.config import load_config
from gateway.drain import BACKSTOP_S
from tests.deploy.tools import DEPLOY, promtool, tool

COMPOSE = DEPLOY / "compose.yaml"
ENV = {"FAREBOX_ADMIN_KEY": "compose-admin-key-0123456789"}
_VARIABLE = re.compile(r"\$(?:\$|\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\})")


class InterpolationError(ValueError):
    pass


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error},
    ${VAR?error} and $$ (a literal $)."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        if name is None:
            return "$"
        found = env.get(name)
        unset = found is None or (op is not None and op.startswith(":") and found == "")
        if op is not None and op.endswith("?") and unset:
            raise InterpolationError(f"required variable {name} is missing a value: {arg}")
        if op is not None and op.endswith("-") and unset:
            return arg
        return found or ""

    return _VARIABLE.sub(one, value)


def load(env: dict[str, str] = ENV) -> dict[str, Any]:
    return dict(interpolate(yaml.safe_load(COMPOSE.read_text()), env))


def strict_parse(document: dict[str, Any]) -> Any:
    compose_spec = tool("compose_spec")
    parsed = compose_spec.PyCompose.from_yaml(yaml.safe_dump(document))
    parsed.validate()
    return parsed


def gateways(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in document["services"].items()
        if service.get("command", [None])[0] == "serve"
    }


def test_it_parses_strictly_as_the_compose_spec() -> None:
    parsed = strict_parse(load())
    assert set(parsed.service_names()) == {
        "gateway-1",
        "gateway-2",
        "lb",
        "sim",
        "redis",
        "postgres",
        "prometheus",
        "grafana",
    }


def test_the_parser_refuses_what_compose_refuses() -> None:
    document = load()
    broken = copy.deepcopy(document)
    broken["services"]["lb"]["restart_policy"] = "always"  # not a service key
    with pytest.raises(ValueError, match="restart_policy"):
        strict_parse(broken)
    broken = copy.deepcopy(document)
    broken["services"]["redis"]["healthcheck"]["interval"] = "5 parsecs"
    with pytest.raises(ValueError, match="duration"):
        strict_parse(broken)


def test_the_admin_key_is_required_from_the_environment() -> None:
    with pytest.raises(InterpolationError, match="FAREBOX_ADMIN_KEY"):
        load({})
    for service in gateways(load()).values():
        assert service["environment"]["FAREBOX_ADMIN_KEY"] == ENV["FAREBOX_ADMIN_KEY"]


def _bind_source(volume: str) -> Path | None:
    source = volume.split(":")[0]
    return (DEPLOY / source).resolve() if source.startswith(".") else None


def test_every_reference_resolves() -> None:
    document = load()
    services, volumes = document["services"], document["volumes"]
    for name, service in services.items():
        for needed in service.get("depends_on", {}):
            assert needed in services, (name, needed)
        for volume in service.get("volumes", []):
            source = _bind_source(volume)
            if source is None:
                assert volume.split(":")[0] in volumes, (name, volume)
            else:
                assert source.exists(), (name, volume)


def test_two_gateway_replicas_each_with_their_own_spool() -> None:
    replicas = gateways(load())
    assert sorted(replicas) == ["gateway-1", "gateway-2"]
    data = [
        volume.split(":")[0]
        for service in replicas.values()
        for volume in service["volumes"]
        if volume.endswith(":/var/lib/farebox")  # the image's FAREBOX_DATA_DIR
    ]
    assert len(set(data)) == 2  # a spool per process, as in the Helm chart
    for service in replicas.values():
        env = service["environment"]
        assert urlsplit(env["FAREBOX_DATABASE_URL"]).hostname == "postgres"
        assert urlsplit(env["FAREBOX_REDIS_URL"]).hostname == "redis"
        assert service["read_only"] is True and service["tmpfs"] == ["/tmp"]
        grace = float(env["FAREBOX_SHUTDOWN_GRACE_S"])
        assert int(service["stop_grace_period"].rstrip("s")) > grace + BACKSTOP_S
        assert {"postgres", "redis", "sim"} <= set(service["depends_on"])


def test_the_load_balancer_and_prometheus_reach_every_replica() -> None:
    document = load()
    replicas = gateways(document)
    nginx = (DEPLOY / "compose" / "nginx.conf").read_text()
    upstream = re.findall(r"^\s*server (\S+):(\d+)", nginx, re.MULTILINE)
    assert sorted(upstream) == [(name, "4000") for name in sorted(replicas)]
    assert "proxy_buffering off;" in nginx  # streams pass token by token
    assert document["services"]["lb"]["ports"] == ["4000:4000"]
    assert set(document["services"]["lb"]["depends_on"]) == set(replicas)
    prometheus = yaml.safe_load((DEPLOY / "compose" / "prometheus.yml").read_text())
    (farebox,) = [job for job in prometheus["scrape_configs"] if job["job_name"] == "farebox"]
    ports = {service["environment"]["FAREBOX_METRICS_PORT"] for service in replicas.values()}
    expected = sorted(f"{name}:{port}" for name in replicas for port in ports)
    assert sorted(farebox["static_configs"][0]["targets"]) == expected
    mounts = dict(v.split(":")[1::-1] for v in document["services"]["prometheus"]["volumes"])
    (rules,) = prometheus["rule_files"]
    assert mounts[str(Path(rules).parent)] == "../dashboards/alerts"


def test_the_mounted_gateway_configuration_routes_to_the_simulator() -> None:
    document = load()
    sim = document["services"]["sim"]["command"]
    sim_port = int(sim[sim.index("--port") + 1])
    config = load_config(DEPLOY / "compose" / "farebox.yaml")
    assert config.models
    for route in config.models.values():
        url = urlsplit(route.base_url)
        assert (url.hostname, url.port) == ("sim", sim_port)


def _uncommented_vllm() -> dict[str, Any]:
    """compose.yaml with its commented vLLM service (and volume) switched on."""
    lines, out, inside = COMPOSE.read_text().splitlines(), [], False
    for line in lines:
        inside = inside or line.startswith("  # vllm:")
        if inside and not line.strip():
            inside = False
        if inside or line.startswith("  # hf-cache:"):
            line = line.replace("# ", "", 1)
        out.append(line)
    return dict(interpolate(yaml.safe_load("\n".join(out)), ENV))


def test_the_commented_vllm_service_is_valid_once_uncommented() -> None:
    document = _uncommented_vllm()
    vllm = document["services"]["vllm"]
    assert vllm["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert "hf-cache" in document["volumes"]
    strict_parse(document)


def test_grafana_gets_what_the_dashboards_provisioning_reads() -> None:
    """dashboards/ (docs/dashboards.md) is mounted where its own files expect it."""
    grafana = load()["services"]["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    provisioning = DEPLOY / mounts["/etc/grafana/provisioning"]
    wanted: set[str] = set()
    for source in (provisioning / "datasources").glob("*.yml"):
        wanted |= set(re.findall(r"\$\{(\w+)\}", source.read_text()))
    assert wanted and wanted <= set(grafana["environment"]), wanted
    # The ledger role is the one postgres-init.sh makes (tests/deploy/test_postgres_init.py).
    script = (DEPLOY / "compose" / "postgres-init.sh").read_text()
    made = re.search(r"GRAFANA_DB_USER:-(\w+)", script)
    assert made is not None and grafana["environment"]["LEDGER_DB_USER"] == made.group(1)
    for provider in (provisioning / "dashboards").glob("*.yml"):
        for entry in yaml.safe_load(provider.read_text())["providers"]:
            path = entry["options"]["path"]
            assert list((DEPLOY / mounts[path]).glob("*.json")), path
    prometheus = load()["services"]["prometheus"]
    alerts = {v.split(":")[1]: v.split(":")[0] for v in prometheus["volumes"]}
    assert list((DEPLOY / alerts["/etc/prometheus/alerts"]).glob("*.yml"))


def test_prometheus_accepts_the_config_with_the_alert_rules_it_mounts(tmp_path: Path) -> None:
    """`promtool check config` (Debian's, installed by .ci/prometheus) on the compose
    Prometheus config, its rule glob pointed at the directory compose mounts there."""
    prometheus = load()["services"]["prometheus"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in prometheus["volumes"]}
    config = yaml.safe_load((DEPLOY / "compose" / "prometheus.yml").read_text())
    (rules,) = config["rule_files"]
    local = (DEPLOY / mounts[str(Path(rules).parent)]).resolve() / Path(rules).name
    config["rule_files"] = [str(local)]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [promtool(), "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout and "rules found" in done.stdout, done.stdout
