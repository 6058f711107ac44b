"""The probe commands deploy/ ships, read from the files that ship them."""

from __future__ import annotations

import json
import re

import yaml

from tests.deploy.tools import CHART, DEPLOY


def docker_healthcheck() -> list[str]:
    """The Dockerfile's HEALTHCHECK command (exec form)."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    found = re.search(r"^HEALTHCHECK .*? CMD (\[.*\])$", text, re.MULTILINE)
    assert found is not None
    return list(json.loads(found.group(1)))


def chart_readiness_probe(rendered_deployment: str) -> list[str]:
    """The readiness probe of the rendered Deployment (exec form)."""
    deployment = yaml.safe_load(rendered_deployment)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return list(container["readinessProbe"]["exec"]["command"])


__all__ = ["CHART", "chart_readiness_probe", "docker_healthcheck"]
