"""Where the gateway's CPU goes under load: py-spy raw stacks, summed two ways.

`start` samples a running process tree (py-spy record --format raw, non-blocking) while a
load run goes on; `summarize` gives each sample to the part of the stack nearest its leaf
that is known (a library, or a gateway package: so `json` called by the pipeline counts
as the pipeline's), as the issue's "where the CPU goes" table does, and lists the top leaf
functions.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

# (label, substrings of a frame's file path, after a "/" is put before it: py-spy writes
# paths relative to sys.path); a sample goes to the label of the frame nearest its leaf.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("httpx / httpcore client", ("/httpx/", "/httpcore/", "/httpx2/", "/httpcore2/")),
    ("aiohttp", ("/aiohttp/",)),
    ("uvicorn / h11 / httptools", ("/uvicorn/", "/h11/", "/httptools/")),
    ("starlette / fastapi", ("/starlette/", "/fastapi/")),
    ("asyncio loop", ("/asyncio/", "/uvloop/")),
    ("anyio (thread pool, streams)", ("/anyio/",)),
    ("gateway/pipeline (other stages)", ("/gateway/pipeline/",)),
    ("gateway/prefix (prefix check)", ("/gateway/prefix/",)),
    ("gateway/ledger (ledger)", ("/gateway/ledger/",)),
    ("gateway/policy", ("/gateway/policy/",)),
    ("gateway/upstream", ("/gateway/upstream/",)),
    ("gateway/state", ("/gateway/state/",)),
    ("sqlalchemy / aiosqlite / asyncpg", ("/sqlalchemy/", "/aiosqlite/", "/asyncpg/")),
    ("redis client", ("/redis/",)),
    ("prometheus metrics", ("/prometheus_client/", "/gateway/metrics")),
    ("logging", ("/logging/",)),
    ("json (stdlib)", ("/json/",)),
    ("gateway (other modules)", ("/gateway/",)),  # last: the packages above come first
)


@dataclass
class Profile:
    """Shares of py-spy samples: by part of the stack, and by leaf function."""

    samples: int = 0
    parts: list[tuple[str, float]] = field(default_factory=list)
    leaves: list[tuple[str, float]] = field(default_factory=list)
    note: str = ""

    def report(self) -> dict[str, object]:
        return {
            "samples": self.samples,
            "parts": self.parts,
            "leaves": self.leaves,
            "note": self.note,
        }


def py_spy() -> str | None:
    """py-spy beside the interpreter (the .venv) or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def start(pid: int, seconds: float, out: Path, core: str) -> subprocess.Popen[bytes] | None:
    """Start sampling `pid` and its subprocesses for `seconds`; None when py-spy is absent."""
    tool = py_spy()
    if tool is None:
        return None
    command = ["taskset", "-c", core, tool, "record", "--pid", str(pid), "--subprocesses"]
    command += ["--duration", str(max(1, round(seconds))), "--rate", "250", "--nonblocking"]
    command += ["--format", "raw", "--output", str(out)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def finish(sampler: subprocess.Popen[bytes] | None, out: Path) -> Profile:
    if sampler is None:
        return Profile(note="py-spy is not installed: `.venv/bin/pip install py-spy`")
    _, err = sampler.communicate(timeout=120)
    if not out.exists():
        return Profile(note=f"py-spy wrote nothing: {err.decode(errors='replace')[-300:]}")
    return summarize(out.read_text(errors="replace"))


def summarize(raw: str, top: int = 12) -> Profile:
    """Shares of samples from py-spy's raw (collapsed) output: `f1;f2;...;fn COUNT` lines."""
    parts: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        parts[_part(frames)] += count
        leaves[_short(frames[-1])] += count
    if not total:
        return Profile(note="py-spy caught no samples")
    share = lambda n: round(100 * n / total, 1)  # noqa: E731
    return Profile(
        samples=total,
        parts=[(label, share(n)) for label, n in parts.most_common()],
        leaves=[(name, share(n)) for name, n in leaves.most_common(top)],
    )


def _part(frames: list[str]) -> str:
    """The label of the known part nearest the leaf, or "other"."""
    for frame in reversed(frames):
        where = "/" + frame.partition(" (")[2]
        for label, needles in PARTS:
            if any(needle in where for needle in needles):
                return _gateway_part(where) if label == "gateway (other modules)" else label
    return "other (interpreter, unlabelled libraries)"


def _gateway_part(where: str) -> str:
    """`/.../gateway/api/chat.py:12` -> `gateway/api`; `/.../gateway/rawjson.py:3` -> itself."""
    rest = where.rsplit("/gateway/", 1)[1].split(":", 1)[0]
    return "gateway/" + rest.split("/", 1)[0]


def _short(frame: str) -> str:
    """`func (path/to/site-packages/pkg/mod.py:12)` -> `func (pkg/mod.py:12)`."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    for marker in ("site-packages/", "lib/python3.11/", "/work/main/"):
        if marker in where:
            where = where.split(marker, 1)[1]
    return f"{name} ({where})" if where else name
