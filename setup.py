"""Build the optional native helpers (prefix locator, JSON value walker); the rest is in pyproject.toml.

`optional=True`: a machine without a C compiler still installs Farebox, and the scan falls
back to pure Python (same results, ~10x slower on a first-seen prompt; see docs/prefix.md;
`gateway/rawjson.py` then decodes the body to str to find its members).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gateway.prefix._locate",
            sources=["gateway/prefix/_locate.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "gateway._rawjson",
            sources=["gateway/_rawjson.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
