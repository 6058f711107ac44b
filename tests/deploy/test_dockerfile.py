"""deploy/Dockerfile, checked without a container engine (none runs on the CI machine).

hadolint lints it; the rest reads its instructions: two stages, the runtime installing
only the wheelhouse the builder made, a non-root user, the data volume where the gateway
writes, a health check on /healthz, and the native modules setup.py builds required.
The image itself is built only where a Docker daemon is available (docs/deploy.md).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from dataclasses import dataclass, field

from tests.deploy.tools import DEPLOY, ROOT, hadolint

DOCKERFILE = DEPLOY / "Dockerfile"


@dataclass
class Stage:
    image: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for name, args in self.instructions if name == keyword]


def stages() -> list[Stage]:
    """The Dockerfile's stages, each with its instructions (continuations joined)."""
    lines = [
        line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")
    ]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    found: list[Stage] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        keyword, _, args = line.strip().partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            image, _, name = args.partition(" AS ")
            found.append(Stage(image.strip(), name.strip()))
        elif found:
            found[-1].instructions.append((keyword, " ".join(args.split())))
    return found


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_wheel_is_built_in_one_stage_and_installed_alone_in_another() -> None:
    builder, runtime = stages()
    assert (builder.name, runtime.name) == ("builder", "runtime")
    assert builder.image == runtime.image == "${PYTHON_IMAGE}"
    assert any("pip wheel" in run and "/wheels" in run for run in builder.all("RUN"))
    # The runtime copies nothing from the build context: it installs the wheelhouse,
    # mounted from the builder for that one step, offline.
    assert runtime.all("COPY") == [] and runtime.all("ADD") == []
    (install,) = [run for run in runtime.all("RUN") if "pip install" in run]
    assert "--mount=type=bind,from=builder,source=/wheels" in install
    assert "--no-index --find-links=/wheels farebox" in install


def _extensions() -> set[str]:
    """The native modules setup.py builds (Extension names)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    return {
        str(node.args[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "Extension"
        and isinstance(node.args[0], ast.Constant)
    }


def test_the_image_refuses_a_wheel_without_the_native_modules() -> None:
    builder, runtime = stages()
    wheel_check = " ".join(builder.all("RUN"))
    import_check = " ".join(runtime.all("RUN"))
    for module in _extensions():  # gateway.prefix._locate, gateway._rawjson, ..._plain_event
        assert module.replace(".", "/") in wheel_check, module
        assert f"import {module}" in import_check or f", {module}" in import_check, module


def test_the_runtime_runs_as_a_user_with_its_data_on_a_volume() -> None:
    runtime = stages()[-1]
    (user,) = runtime.all("USER")
    assert user.split(":")[0] not in {"root", "0"}
    env = " ".join(runtime.all("ENV"))
    data_dir = re.search(r"FAREBOX_DATA_DIR=(\S+)", env)
    assert data_dir is not None
    # The only place the gateway writes (spool, SQLite ledger) is a volume: the root
    # filesystem can be read-only (docker run --read-only, readOnlyRootFilesystem).
    assert json.loads(runtime.all("VOLUME")[0]) == [data_dir.group(1)]
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    # The user owns that directory (created with `install -o farebox`, uid 10001).
    assert any(
        f"-o farebox -g farebox -m 0750 {data_dir.group(1)}" in r for r in runtime.all("RUN")
    )
    assert "--uid 10001" in " ".join(runtime.all("RUN")) and user == "10001:10001"


def test_it_serves_on_all_interfaces_behind_a_health_check() -> None:
    runtime = stages()[-1]
    assert runtime.all("EXPOSE") == ["4000"]
    assert "FAREBOX_PORT=4000" in " ".join(runtime.all("ENV"))
    assert json.loads(runtime.all("ENTRYPOINT")[0]) == ["farebox"]
    # 0.0.0.0 in open mode is refused: FAREBOX_ADMIN_KEY must come from the environment.
    assert json.loads(runtime.all("CMD")[0]) == ["serve", "--host", "0.0.0.0"]
    (check,) = runtime.all("HEALTHCHECK")
    assert "/healthz" in check and "FAREBOX_PORT" in check


def test_the_build_context_keeps_what_the_builder_copies() -> None:
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert "*" in ignore  # everything else stays out (.venv, .git, tests, bench)
    builder = stages()[0]
    copied = {src.rstrip("/") for copy in builder.all("COPY") for src in copy.split()[:-1]}
    assert copied == kept, (copied, kept)


def test_dependencies_come_from_the_lock_file_with_the_makefiles_uv() -> None:
    builder = stages()[0]
    runs = " ".join(builder.all("RUN"))
    assert "uv export --frozen --no-emit-project --no-dev" in runs
    assert "--requirement /tmp/requirements.txt" in runs
    (uv_arg,) = [arg for arg in builder.all("ARG") if arg.startswith("UV_VERSION=")]
    makefile = re.search(r"^UV_VERSION \?= (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert makefile is not None and uv_arg == f"UV_VERSION={makefile.group(1)}"
