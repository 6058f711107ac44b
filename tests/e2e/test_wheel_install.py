"""The wheel, installed outside the repository, works: `farebox --version`, `cost`, `serve`.

The wheel is built from a copy of the sources with the project's setuptools (no build
environment to download) and installed with `--no-deps` into a fresh virtual environment
in a temporary folder. Its dependencies come from the project's environment through a
`.pth` line, never the checkout: every command runs from a temporary folder and the test
checks that `gateway` is imported from the new environment. Building the same sources
without a working C compiler gives a wheel labelled pure Python; setup.py's choice of
modules (built, skipped on purpose, or a failed release build) is checked in-process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "MANIFEST.in", "gateway")


def _copy_sources(target: Path) -> Path:
    """The files a build reads, without the checkout's build outputs (.so, caches)."""
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
            shutil.copytree(ROOT / name, target / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, target / name)
    return target


def _build(sources: Path, out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation"]
    command += ["--disable-pip-version-check", "-w", str(out), str(sources)]
    scrubbed = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, cwd=out.parent, env=scrubbed | env
    )


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy_sources(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def wheel(sources: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = _build(sources, out)
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = out.glob("farebox-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel; the project's site-packages reached by a .pth line."""
    home = tmp_path_factory.mktemp("venv") / "farebox-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    python = home / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps"]
    install += ["--no-index", "--disable-pip-version-check", "--quiet", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=120)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    # Appended after the venv's own site-packages: the installed gateway comes first, and
    # the editable install's .pth files in the project's venv are not processed from here.
    Path(purelib, "_project_dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    return home


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A working folder outside the checkout, and an environment that names no Farebox path."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAREBOX_", "PYTHON"))}
    env |= {"HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    env.pop("XDG_DATA_HOME", None)
    yield cwd, env
    assert list(cwd.iterdir()) == []  # nothing (no .farebox/) made where the user stands


def _run(venv: Path, cwd: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        capture_output=True, text=True, timeout=60, cwd=cwd, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _wait_live(port: int, process: subprocess.Popen[str], timeout: float = 60) -> None:
    """Until /healthz answers (readiness would also wait for litellm, which the example
    does not use: sim-claude is the default's one litellm route)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"farebox serve exited: {process.communicate()[0]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError("farebox serve did not answer /healthz")


def test_the_wheel_carries_the_default_config_and_the_native_modules(
    wheel: Path, sources: Path
) -> None:
    assert "-cp3" in wheel.name and "-none-any" not in wheel.name  # a platform wheel
    names = zipfile.ZipFile(wheel).namelist()
    assert "gateway/default.yaml" in names
    assert "gateway/ledger/migrations/script.py.mako" in names
    assert any(n.startswith("gateway/prefix/_locate.") and n.endswith(".so") for n in names)
    assert any(n.startswith("gateway/_rawjson.") and n.endswith(".so") for n in names)
    assert any(n.startswith("gateway/upstream/_plain_event.") and n.endswith(".so") for n in names)
    assert not [n for n in names if n.endswith(".c")]
    # Every file the package reads at run time (configs, migrations, the UI's static files):
    # one left out of [tool.setuptools.package-data] works from the checkout only.
    shipped = {  # in the copy the wheel was built from: the checkout may change meanwhile
        path.relative_to(sources).as_posix()
        for path in (sources / "gateway").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
        and path.suffix not in {".c", ".so", ".pyc"}
    }  # fmt: skip
    assert shipped <= set(names), sorted(shipped - set(names))


def test_installed_outside_the_repository_it_serves_prices_and_answers_the_sdk(
    venv: Path, outside: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    cwd, env = outside
    port = free_port()
    data = tmp_path / "data"
    serving = env | {"FAREBOX_PORT": str(port), "FAREBOX_DATA_DIR": str(data)}
    process = subprocess.Popen(
        [str(venv / "bin" / "farebox"), "serve"], cwd=cwd, env=serving,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:  # the one-shot commands run while the gateway starts
        where = _run(venv, cwd, env, "python", "-c", "import gateway; print(gateway.__file__)")
        assert Path(where.strip()).is_relative_to(venv), where  # not the checkout
        version = _run(venv, cwd, env, "farebox", "--version")
        assert version.startswith(
            "farebox 0.1.0 (native: prefix locator, JSON walker, stream reader;"
        ), version
        priced = json.loads(
            _run(venv, cwd, env, "farebox", "cost", "--model", "sim-claude", "--input", "1000",
                 "--output", "100", "--json")
        )  # fmt: skip
        assert priced["total_usd"] == "0.0045"  # Sonnet 4.5's prices: 1000 x $3 + 100 x $15
        _wait_live(port, process)
        example = serving | {"FAREBOX_BASE_URL": f"http://127.0.0.1:{port}/v1"}
        said = _run(venv, cwd, example, "python", str(ROOT / "examples" / "example.py"))
        assert said.count("CompletionUsage(") == 2, said
        page = httpx.get(f"http://127.0.0.1:{port}/ui/app.js", timeout=10)  # package data
        assert page.status_code == 200 and len(page.content) > 1000, page.text[:200]
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    # uvicorn re-raises the SIGTERM it handled once it has shut down cleanly.
    assert process.returncode in (0, -signal.SIGTERM) and "Traceback" not in output, output
    installed = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert f"serving on http://127.0.0.1:{port}/v1" in output  # FAREBOX_PORT honoured
    assert f"config: the embedded default, {installed}/site-packages/gateway/default.yaml" in output
    assert (data / "farebox.db").is_file()


def test_without_a_c_compiler_the_wheel_is_labelled_pure_python(
    sources: Path, tmp_path: Path
) -> None:
    # CC names a compiler that always fails: the probe in setup.py sees no working one.
    built = _build(sources, tmp_path, CC="false")
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = tmp_path.glob("farebox-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".so")]
    assert "building the pure-Python package (py3-none-any)" in built.stdout + built.stderr


def _setup_module() -> ModuleType:
    """setup.py as a module: only `python setup.py` / a build backend calls setup()."""
    spec = importlib.util.spec_from_file_location("farebox_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_natives_are_built_required_or_skipped_as_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    setup = _setup_module()
    built = setup._extensions()  # this machine has a compiler and Python's headers
    assert [e.name for e in built] == [
        "gateway.prefix._locate",
        "gateway._rawjson",
        "gateway.upstream._plain_event",
    ]
    assert not any(e.optional for e in built)  # a failure to build them fails the build
    monkeypatch.setenv("FAREBOX_PURE_PYTHON", "1")
    assert setup._extensions() == []
    monkeypatch.delenv("FAREBOX_PURE_PYTHON")
    monkeypatch.setenv("CC", "false")
    monkeypatch.setenv("FAREBOX_REQUIRE_NATIVE", "1")
    with pytest.raises(SystemExit) as refused:
        setup._extensions()
    assert "FAREBOX_REQUIRE_NATIVE=1 but no C extension can be built here" in str(refused.value)
    assert "apt-get install gcc python3-dev" in str(refused.value)  # the fix


def test_the_sdist_carries_the_c_sources_and_the_default(sources: Path, tmp_path: Path) -> None:
    """A pure-Python build elsewhere can still build the natives from the sdist."""
    build = (
        "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", build, str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=sources,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with tarfile.open(tmp_path / done.stdout.strip().splitlines()[-1]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"gateway/_rawjson.c", "gateway/prefix/_locate.c", "gateway/default.yaml"} <= names
    assert "gateway/upstream/_plain_event.c" in names
