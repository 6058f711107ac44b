"""Build the optional native locator of the prefix scan; everything else is in pyproject.toml.

`optional=True`: a machine without a C compiler still installs Farebox, and the scan falls
back to pure Python (same results, ~10x slower on a first-seen prompt; see docs/prefix.md).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gateway.prefix._locate",
            sources=["gateway/prefix/_locate.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
