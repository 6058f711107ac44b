"""`farebox policy check` and `farebox policy explain`: validate a policy, or show a plan.

Exit status: 0 when the policy is valid (check) or the request would be served (explain),
1 when the policy is invalid or a strict rule rejects the request, 2 when a file cannot
be read at all. Nothing here calls a model.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape

from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.pipeline.identify import caller_id
from gateway.policy.decision import Decision
from gateway.policy.explain import explain, render_decision
from gateway.policy.facts import RequestFacts
from gateway.policy.families import FamilyFinding, derive_family
from gateway.policy.planner import plan_route
from gateway.policy.schema import Family
from gateway.policy.source import PolicyError, Problem, load_policy
from gateway.pricing import PriceBook

EXIT_OK, EXIT_INVALID, EXIT_UNREADABLE = 0, 1, 2


class ExplainInputError(ValueError):
    """The request file, a header or the model named is unusable for `policy explain`."""


def family_of(route: Mapping[str, Any]) -> Family:
    """A `models:` entry's wire family: `family` if set, else from provider and base_url."""
    return finding_of(route).family


def finding_of(route: Mapping[str, Any]) -> FamilyFinding:
    """A `models:` entry's family with whether it was guessed (the rule `wire_family` uses)."""
    family, base_url = route.get("family"), route.get("base_url")
    return derive_family(
        str(route.get("provider") or "openai"),
        base_url if isinstance(base_url, str) else None,
        family if isinstance(family, str) else None,
    )


def _print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


def _status(error: PolicyError) -> int:
    unreadable = any(p.location == "(file)" and "cannot read" in p.message for p in error.problems)
    return EXIT_UNREADABLE if unreadable else EXIT_INVALID


def _problem_json(problem: Problem) -> dict[str, Any]:
    return {"line": problem.line, "location": problem.location, "message": problem.message}


def _report_error(error: PolicyError, json_output: bool, console: Console) -> int:
    if json_output:
        problems = [_problem_json(problem) for problem in error.problems]
        _print_json({"file": error.source, "ok": False, "errors": problems})
    else:
        for problem in error.problems:
            console.print(f"[red]error[/] {escape(problem.render(error.source))}")
    return _status(error)


def policy_check(file: Path, json_output: bool, console: Console | None = None) -> int:
    """Validate the policy keys of a configuration file and report file, line and reason."""
    console = console or Console()
    try:
        policy, raw = load_policy(file)
    except PolicyError as error:
        return _report_error(error, json_output, console)
    routing, warnings = sorted(policy.routing), family_warnings(raw)
    if json_output:
        report = {"file": str(file), "ok": True, "rules": len(policy.rules), "routing": routing}
        _print_json({**report, "warnings": warnings})
    else:
        routed = ", ".join(routing) or "none"
        console.print(
            f"[green]ok[/] {escape(str(file))}: {len(policy.rules)} rule(s), routing for {routed}"
        )
        for warning in warnings:
            console.print(f"[yellow]warning[/] {escape(warning)}")
    return EXIT_OK


def family_warnings(raw: Mapping[str, Any]) -> list[str]:
    """One warning per `models:` entry whose backend family had to be guessed."""
    models = raw.get("models")
    routes = models.items() if isinstance(models, dict) else ()
    found = [
        finding_of(route).warning(str(alias)) for alias, route in routes if isinstance(route, dict)
    ]
    return [warning for warning in found if warning is not None]


def parse_headers(headers: Sequence[str]) -> dict[str, str]:
    """Turn `Name: value` strings into a lower-case-keyed mapping."""
    parsed: dict[str, str] = {}
    for header in headers:
        name, colon, value = header.partition(":")
        if not colon or not name.strip():
            raise ExplainInputError(f"header '{header}' is not in the form 'Name: value'")
        parsed[name.strip().lower()] = value.strip()
    return parsed


def _read_request(path: Path) -> dict[str, Any]:
    try:
        body = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ExplainInputError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise ExplainInputError(f"{path}: expected a chat-completions body with a 'model' string")
    return body


def _gateway_config(config: Path) -> GatewayConfig:
    try:
        return load_config(config)
    except ConfigError as exc:
        raise ExplainInputError(str(exc)) from exc


def _explain_data(
    body: dict[str, Any],
    headers: dict[str, str],
    config: Path,
) -> tuple[dict[str, Any], Decision]:
    """Plan as the live path does: `plan_route`, with the price book's model map."""
    gateway_config = _gateway_config(config)
    alias = body["model"]
    if alias not in gateway_config.models:
        known = ", ".join(sorted(gateway_config.models)) or "none"
        raise ExplainInputError(f"model '{alias}' is not configured in {config} (known: {known})")
    facts = RequestFacts.from_headers(
        alias, headers, caller=caller_id(headers.get("authorization"))
    )
    model_map = PriceBook(gateway_config.prices).model_map
    decision = plan_route(gateway_config, model_map, facts, body)
    data = explain(decision, body)
    served = gateway_config.models.get(decision.alias)
    data["upstream_model"] = served.model if served is not None else None
    return data, decision


def policy_explain(
    request_file: Path,
    config: Path,
    headers: list[str],
    json_output: bool,
    console: Console | None = None,
) -> int:
    """Print what the policy in `config` would do with the request in `request_file`."""
    console = console or Console()
    try:
        load_policy(config)  # the policy's own errors, with file and line
    except PolicyError as error:
        return _report_error(error, json_output, console)
    try:
        body = _read_request(request_file)
        data, decision = _explain_data(body, parse_headers(headers), config)
    except OSError as exc:
        console.print(f"[red]error[/] cannot read {escape(str(request_file))}: {exc.strerror}")
        return EXIT_UNREADABLE
    except ExplainInputError as exc:
        console.print(f"[red]error[/] {escape(str(exc))}")
        return EXIT_INVALID
    if json_output:
        _print_json(data)
    else:
        render_decision(decision, console)
    return EXIT_INVALID if decision.rejected else EXIT_OK
