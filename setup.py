"""Build the native helpers (prefix locator, JSON value walker); the rest is in pyproject.toml.

Three ways a build goes (docs/install.md):

- a C compiler and Python's headers work: both modules are built, and a failure to build
  them fails the build (a platform wheel, e.g. cp311-cp311-linux_x86_64);
- they do not (probed by compiling a two-line file against Python.h): no module is built
  and the wheel is labelled pure Python (py3-none-any), with a warning. The scan falls back
  to Python (same results, ~10x slower on a first-seen prompt; see docs/prefix.md;
  `gateway/rawjson.py` then decodes the body to str to find its members);
- `FAREBOX_REQUIRE_NATIVE=1` (release builds, the container image): a failed probe fails
  the build instead. `FAREBOX_PURE_PYTHON=1` skips the natives on purpose.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
from pathlib import Path

from setuptools import Extension, setup

PROBE = "#include <Python.h>\nint farebox_probe(void) { return Py_IsInitialized(); }\n"


def _compiler_works() -> str | None:
    """None when a C extension can be compiled here, else why not."""
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.errors import CCompilerError, DistutilsError
    from setuptools._distutils.sysconfig import customize_compiler

    compiler = new_compiler()
    customize_compiler(compiler)  # honours CC and CFLAGS, as the real build does
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "probe.c"
        source.write_text(PROBE)
        try:
            compiler.compile(
                [str(source)], output_dir=work, include_dirs=[sysconfig.get_paths()["include"]]
            )
        except (CCompilerError, DistutilsError, OSError) as exc:
            return f"{type(exc).__name__}: {exc}"
    return None


def _extensions() -> list[Extension]:
    if os.environ.get("FAREBOX_PURE_PYTHON") == "1":
        print("farebox: FAREBOX_PURE_PYTHON=1: building the pure-Python package", file=sys.stderr)
        return []
    problem = _compiler_works()
    if problem is not None:
        if os.environ.get("FAREBOX_REQUIRE_NATIVE") == "1":
            sys.exit(
                f"farebox: FAREBOX_REQUIRE_NATIVE=1 but no C extension can be built here "
                f"({problem}): install a C compiler and the Python headers "
                "(Debian: apt-get install gcc python3-dev)"
            )
        print(
            f"farebox: WARNING: no C compiler or Python headers ({problem}); building the "
            "pure-Python package (py3-none-any): same results, the prefix scan ~10x slower",
            file=sys.stderr,
        )
        return []
    return [
        Extension(name, sources=[source], extra_compile_args=["-O3"])
        for name, source in (
            ("gateway.prefix._locate", "gateway/prefix/_locate.c"),
            ("gateway._rawjson", "gateway/_rawjson.c"),
            ("gateway.upstream._plain_event", "gateway/upstream/_plain_event.c"),
        )
    ]


# Build backends run this file as __main__; tests import it to check _extensions() alone.
if __name__ == "__main__":
    setup(ext_modules=_extensions())
