"""wrk and nginx: load tools in C, for bench/hotpath.py's 1-vs-2 workers comparison.

On this 2-core box the load shares the cores with the gateway. perf-floor's loadgen.py and
mock (Python: aiohttp, asyncio) took 0.21-0.53 ms of CPU per request between them, as much
as half of what a worker costs, so they, not the gateway, decided what a second worker
could add: at most 1.01-1.17x in the full runs of 2026-12-03 (bench/RESULTS.md's "what
bounds it"). wrk (Debian's package) and nginx (Debian's nginx-light) do the same work for
about a fifth of that (docs/performance.md, "Two workers with load tools in C").

`NativeLoad` has what `hotpath_load.measure` needs of a load, as `LoadSetup` does:
`run` (one measured run, as a summary in loadgen.py's shape), `load_seconds` (the tools'
CPU so far) and `connections` (the upstream's accepted connections, for opens per request).

nginx answers what perf-floor's mock answers for a small request: the same reply, whole or
streamed (a role chunk, 16 token chunks, a finish chunk, a usage chunk, `[DONE]`), chosen
by the request's Accept header: Farebox asks an OpenAI-compatible upstream for a stream
with `Accept: text/event-stream`. A streamed reply comes with a Content-Length rather than
chunked, and all at once, as from an instant upstream. wrk reports no time to first token;
the comparison is of requests per second and CPU.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from hotpath_load import Budget, Scenario, redis_cpu_seconds
from hotpath_procs import TICK_S, Proc, cpu_ticks, launch, wait_http

TOKENS = 16  # perf-floor's mock's default --tokens
CREATED = 1_700_000_000
USAGE = {"prompt_tokens": 4, "completion_tokens": TOKENS, "total_tokens": 4 + TOKENS}

NGINX_CONF = """\
# bench/native_load.py: an instant OpenAI-compatible upstream, one process.
daemon off;
master_process off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {work}/nginx-body;
  client_body_buffer_size 2m;
  client_max_body_size 8m;
  keepalive_requests 10000000;
  keepalive_timeout 75s;
  server {{
    listen 127.0.0.1:{port};
    location = /v1/chat/completions {{
      if ($http_accept = "text/event-stream") {{ rewrite ^ /bench/stream last; }}
      default_type application/json;
      return 200 '{whole}';
    }}
    location = /bench/stream {{
      internal;
      default_type text/event-stream;
      return 200 '{stream}';
    }}
    location = /bench/status {{ stub_status; }}
    location = /health {{ return 200 'ok'; }}
  }}
}}
"""

# wrk sends loadgen.py's small request (a new number in each), and writes what it measured
# as JSON to WRK_JSON_OUT when done: latencies in microseconds.
WRK_SCRIPT = """\
local n = 0
local model = os.getenv("WRK_MODEL")
local tail = ""
if os.getenv("WRK_STREAM") == "1" then
  tail = ',"stream":true,"stream_options":{"include_usage":true}'
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  n = n + 1
  local body = '{"model":"' .. model .. '","messages":[{"role":"user","content":'
    .. '"Say hello (request ' .. n .. ')."}],"max_tokens":64' .. tail .. '}'
  return wrk.format(nil, nil, nil, body)
end
done = function(summary, latency, requests)
  local e = summary.errors
  local out = io.open(os.getenv("WRK_JSON_OUT"), "w")
  out:write(string.format(
    '{"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,'
      .. '"timeout":%d,"p50_us":%d,"p99_us":%d}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
  out:close()
end
"""


def missing() -> str | None:
    """Why the native load cannot run here (which tool is absent), or None."""
    absent = [name for name in ("wrk", "nginx") if _which(name) is None]
    if not absent:
        return None
    return f"{' and '.join(absent)} not installed (make bench installs them: .ci/load-tools)"


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")


def whole_reply(model: str) -> bytes:
    """perf-floor mock's whole reply to a small request."""
    content = "".join(f" tok{i}" for i in range(TOKENS))
    reply = {
        "id": "chatcmpl-mock1",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": USAGE,
    }
    return _dumps(reply)


def stream_reply(model: str) -> bytes:
    """perf-floor mock's streamed reply, usage included: the events, `[DONE]` last."""
    head: dict[str, object] = {
        "id": "chatcmpl-mock2",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
    }

    def choice(delta: dict[str, str], finish: str | None = None) -> dict[str, object]:
        return {
            **head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    events = [choice({"role": "assistant", "content": ""})]
    events += [choice({"content": f" tok{i}"}) for i in range(TOKENS)]
    events.append(choice({}, "stop"))
    events.append({**head, "choices": [], "usage": USAGE})
    return b"".join(b"data: " + _dumps(event) + b"\n\n" for event in events) + b"data: [DONE]\n\n"


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def nginx_string(body: bytes) -> str:
    """`body` as the inside of a single-quoted nginx string (its parser turns \\n back)."""
    text = body.decode()
    return text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")


def nginx_conf(work: Path, port: int, model: str) -> str:
    whole, stream = nginx_string(whole_reply(model)), nginx_string(stream_reply(model))
    return NGINX_CONF.format(work=work, port=port, whole=whole, stream=stream)


def start_nginx(workdir: Path, port: int, model: str, core: str) -> tuple[Proc, str]:
    """nginx as the upstream, pinned to `core`; returns it and its base URL."""
    work = workdir / "nginx"
    (work / "nginx-body").mkdir(parents=True, exist_ok=True)
    conf = work / "nginx.conf"
    conf.write_text(nginx_conf(work, port, model))
    binary = _which("nginx") or "nginx"
    proc = launch("nginx", [binary, "-c", str(conf), "-p", str(work)], core, workdir, {})
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/health", proc)
    return proc, base


def load_files(workdir: Path) -> dict[str, str]:
    """The wrk script and nginx config a run wrote in `workdir`, for the report: nginx's
    two replies elided (they are `whole_reply` and `stream_reply`, 4 KB), its port and
    folders shown as placeholders."""
    found = {}
    script, conf = workdir / "wrk-post.lua", workdir / "nginx" / "nginx.conf"
    if script.exists():
        found[script.name] = script.read_text()
    if conf.exists():
        text = re.sub(r"return 200 '[^\n]{100,}';", "return 200 '...';", conf.read_text())
        text = re.sub(r"listen 127\.0\.0\.1:\d+;", "listen 127.0.0.1:PORT;", text)
        found[conf.name] = text.replace(str(conf.parent), "WORK")
    return found


def accepted(base: str) -> int | None:
    """Connections nginx accepted since start (stub_status), this request's own included."""
    try:
        with urllib.request.urlopen(f"{base}/bench/status", timeout=5) as reply:
            lines = reply.read().decode().splitlines()
    except OSError:
        return None
    return int(lines[2].split()[0])  # "server accepts handled requests", then the numbers


@dataclass
class NativeLoad:
    """wrk pinned to the load core against targets whose upstream is `nginx`."""

    nginx: Proc
    mock_url: str  # nginx's base URL
    core: str
    workdir: Path
    redis: tuple[str, int] | None = None
    wrk_seconds: float = 0.0  # CPU of every wrk run so far (each reaped with its usage)

    def __post_init__(self) -> None:
        self.script = self.workdir / "wrk-post.lua"
        self.script.write_text(WRK_SCRIPT)

    def argv(self, url: str, scenario: Scenario, seconds: float) -> list[str]:
        """wrk's command line for one run: one thread, `scenario`'s connections."""
        binary = _which("wrk") or "wrk"
        duration = f"-d{max(1, round(seconds))}s"
        connections = f"-c{scenario.concurrency}"
        return [
            "taskset",
            "-c",
            self.core,
            binary,
            "-t1",
            connections,
            duration,
            "--timeout",
            "60s",
            "-s",
            str(self.script),
            url,
        ]

    def run(self, url: str, model: str, scenario: Scenario, budget: Budget) -> dict[str, object]:
        """One wrk run; its summary in loadgen.py's shape. wrk counts the requests it saw
        answered: those still in flight when its time is up are cut, and not counted."""
        if scenario.history or scenario.concurrency < 2:
            raise RuntimeError(f"the native load runs small c=64 requests only, not {scenario.key}")
        with tempfile.TemporaryDirectory(prefix="wrk-") as folder:
            out = Path(folder) / "wrk.json"
            env = os.environ | wrk_env(model, scenario.stream, str(out))
            argv = self.argv(url, scenario, budget.seconds)
            wrk = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
            assert wrk.stderr is not None
            with wrk.stderr:
                printed = wrk.stderr.read().decode(errors="replace")
            _, status, usage = os.wait4(wrk.pid, 0)  # its own CPU, as it ends
            wrk.returncode = os.waitstatus_to_exitcode(status)
            self.wrk_seconds += usage.ru_utime + usage.ru_stime
            if wrk.returncode != 0 or not out.exists():
                raise RuntimeError(f"wrk failed ({scenario.key}): {printed.strip()[-300:]}")
            return summary(json.loads(out.read_text()))

    def load_seconds(self) -> tuple[float, float | None]:
        """CPU seconds so far of wrk's runs and nginx's; Redis's, if it answers."""
        tools = self.wrk_seconds + cpu_ticks(self.nginx.pid) * TICK_S
        return tools, redis_cpu_seconds(self.redis) if self.redis else None

    def connections(self) -> int | None:
        return accepted(self.mock_url)


def wrk_env(model: str, stream: bool, out: str) -> dict[str, str]:
    """What WRK_SCRIPT reads: the model, whether to stream, where to write its summary."""
    return {"WRK_MODEL": model, "WRK_STREAM": str(int(stream)), "WRK_JSON_OUT": out}


def summary(found: dict[str, int]) -> dict[str, object]:
    """wrk's JSON (bench/native_load.py's done()) as loadgen.py's summary."""
    requests, seconds = found["requests"], found["duration_us"] / 1e6
    errors = {
        name: found[name]
        for name in ("connect", "read", "write", "status", "timeout")
        if found[name]
    }
    return {
        "completed": requests - found["status"],
        "sent": requests,
        "errors": errors,
        "rps": round(requests / seconds, 1) if seconds else 0.0,
        "lat_ms": {"p50": found["p50_us"] / 1000, "p99": found["p99_us"] / 1000},
    }
