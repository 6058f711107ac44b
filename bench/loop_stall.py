"""How long adversarial requests hold the gateway's event loop.

Run: `python bench/loop_stall.py` (`--only NAME` for one input). A gateway runs in this
process on a real port, forwarding to the bundled simulator on another; each input is
sent once, first-seen, and the longest lag of the gateway's loop (`gateway.loopwatch`: a
5 ms sleep that wakes late by as much as something held the loop) is printed per input.
The target is 20 ms; the dev box has 2 shared cores and the client, gateway and simulator
share one interpreter here, so numbers are noisy upper bounds: run it twice.

Also printed: the part of the lag the gateway's own CPU explains (the loop's lateness, at
most what all the gateway's threads computed in that period, this bench's own thread left
out: a worker thread holding the interpreter lock counts, a machine too busy to run the
process does not), and the
longest pause of Python's cyclic garbage collector meanwhile (any
thread). A collection holds the interpreter lock throughout, and a full one walks every
tracked object of the process, so it stalls the loop whichever thread triggered it.
"""

from __future__ import annotations

import argparse
import gc
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

# The repository root: `gateway` when not installed, and `tests.servers` always.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gateway.app import create_app
from gateway.config import GatewayConfig, ModelRoute
from gateway.loopwatch import LoopWatch
from gateway.settings import Settings
from tests.servers import running

MiB = 1024 * 1024
TARGET_S = 0.020
Body = dict[str, Any]


def _turns(history: list[Body]) -> Body:
    """A request whose history precedes the newest user turn: the part the prefix check scans."""
    ask = {"role": "user", "content": "What stands out?"}
    return {"model": "chat", "max_tokens": 8, "messages": [*history, ask]}


def number_table(size: int = 2 * MiB, seed: int | None = None) -> Body:
    """A first-seen table of two-digit numbers: each a candidate the scan's regex rejects."""
    rng = random.Random(seed)
    rows = [" ".join(str(rng.randint(10, 29)) for _ in range(32)) for _ in range(size // 96)]
    return _turns([{"role": "system", "content": "\n".join(rows)}])


def short_messages(size: int = 31 * MiB, seed: int | None = None) -> Body:
    """A body near the 32 MiB limit made of many short messages (the count is the cost)."""
    rng = random.Random(seed)
    history: list[Body] = []
    length = 0
    while length < size:
        text = f"step {len(history)}: ok {rng.random():.12f}"
        history.append({"role": "user" if len(history) % 2 else "assistant", "content": text})
        length += len(text) + 40
    return _turns(history)


def long_messages(size: int = 31 * MiB, count: int = 4000, seed: int | None = None) -> Body:
    """A body near the 32 MiB limit in a few thousand messages: a long agent history."""
    rng = random.Random(seed)
    words = ("the", "agent", "reads", "a", "file", "then", "calls", "tool", "and", "writes")
    text = " ".join(rng.choice(words) for _ in range(size // count // 5))
    roles = ("user", "assistant")
    return _turns([{"role": roles[i % 2], "content": f"{i} {text}"} for i in range(count)])


def one_message(size: int = 31 * MiB, seed: int | None = None) -> Body:
    """A body near the 32 MiB limit in one message: one string orjson builds in one call."""
    words = ("the", "agent", "pasted", "a", "whole", "log", "file", "here", "again", "and")
    rng = random.Random(seed)
    text = " ".join(rng.choice(words) for _ in range(size // 5))
    return _turns([{"role": "user", "content": text}])


def timestamped_log(size: int = MiB, seed: int | None = None) -> Body:
    """A tool output of log lines, each with its own timestamp (every line is a hit)."""
    rng = random.Random(seed)
    lines: list[str] = []
    length = 0
    while length < size:
        second = rng.randrange(86_400)
        stamp = f"2026-03-12T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z"
        lines.append(f"{stamp} INFO worker-{rng.randrange(64)} handled job {rng.randrange(10**6)}")
        length += len(lines[-1]) + 1
    return _turns([{"role": "user", "content": "\n".join(lines)}])


def nested_json(depth: int = 120, seed: int | None = None) -> Body:
    """A tool schema nested `depth` levels deep (the gateway refuses more than 128)."""
    schema: Body = {"type": "string"}
    for level in range((depth - 6) // 2):
        schema = {"type": "object", "properties": {f"p{level}": schema}}
    tool = {"type": "function", "function": {"name": "deep", "parameters": schema}}
    return {**_turns([{"role": "user", "content": f"hello {seed}"}]), "tools": [tool]}


def too_deep_json(seed: int | None = None) -> bytes:
    """Valid JSON nested 1,000 levels (orjson reads up to 1,024; the gateway refuses it)."""
    return (
        b'{"model":"chat","messages":[{"role":"user","content":"hi"}],"x":'
        + b"[" * 1000
        + b"]" * 1000
        + b"}"
    )


def long_stream(tokens: int = 160_000, seed: int | None = None) -> Body:
    """A streamed answer of `tokens` chunks (160,000: ~20 MB of SSE) relayed event by event."""
    ask = [{"role": "user", "content": f"Write at length. {seed}"}]
    return {"model": "long", "messages": ask, "stream": True, "max_tokens": tokens}


INPUTS: dict[str, Callable[..., Body | bytes]] = {
    "first-seen 2 MiB table of two-digit numbers": number_table,
    "31 MiB in 4,000 messages": long_messages,
    "31 MiB in 466,000 short messages": short_messages,
    "31 MiB in one message": one_message,
    "1 MiB log, a timestamp per line": timestamped_log,
    "tool schema nested 120 deep": nested_json,
    "JSON nested 1000 deep": too_deep_json,
    "20 MB SSE stream from the upstream": long_stream,
}


def config(sim_url: str) -> GatewayConfig:
    """One route to the simulator, priced, with every prefix action a route can have."""
    route = ModelRoute(provider="openai", model="sim-chat", base_url=f"{sim_url}/v1")
    long = ModelRoute(provider="openai", model="sim-long", base_url=f"{sim_url}/v1")
    gpu = {"cost_per_hour": "3.60", "prefill_tokens_per_second": 10000}
    price = {"gpu": {**gpu, "decode_tokens_per_second": 1000}}
    prices = {"chat": price, "long": price}
    return GatewayConfig.model_validate({"models": {"chat": route, "long": long}, "prices": prices})


class GcPauses:
    """The longest pause of the cyclic garbage collector, in any thread, since `take`.

    `longest` is wall time (what the loop waited); `longest_cpu` the collecting thread's
    CPU time (what the collection itself cost, which a busy machine does not inflate).
    """

    def __init__(self) -> None:
        self.longest = self.longest_cpu = 0.0
        self._started = self._started_cpu = 0.0
        gc.callbacks.append(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started, self._started_cpu = time.perf_counter(), time.thread_time()
        else:
            self.longest = max(self.longest, time.perf_counter() - self._started)
            self.longest_cpu = max(self.longest_cpu, time.thread_time() - self._started_cpu)

    def take(self) -> tuple[float, float]:
        """The longest pause since the last call, wall and CPU time; start over."""
        longest = (self.longest, self.longest_cpu)
        self.longest = self.longest_cpu = 0.0
        return longest


GC_PAUSES = GcPauses()


@dataclass(frozen=True, slots=True)
class Stall:
    """One request's effect on the gateway's loop."""

    status: int
    lag: float  # the longest wall-clock lateness of the loop meanwhile
    cpu: float  # the longest CPU burst of the loop's own thread meanwhile
    elapsed: float  # the request's wall time
    gc_pause: float = 0.0  # the longest garbage collection in the process meanwhile
    busy: float = 0.0  # the longest lag the process's own CPU explains
    gc_cpu: float = 0.0  # the CPU time of the longest-running collection

    def row(self, name: str) -> str:
        """A Markdown table row."""
        ms = f"{self.lag * 1000:.1f} ms | {self.busy * 1000:.1f} ms | {self.cpu * 1000:.1f} ms"
        rest = f"{self.gc_pause * 1000:.0f} ms | {self.elapsed * 1000:.0f} ms"
        return f"| {name} | {self.status} | {ms} | {rest} |"


def send(
    base_url: str, watch: LoopWatch, body: Body | bytes, path: str = "/chat/completions"
) -> Stall:
    """Send one request; return its status, the loop's longest stall meanwhile, wall time."""
    payload = body if isinstance(body, bytes) else orjson.dumps(body)
    # The file goes once the client has read it: deleting 31 MiB is ~30 ms of this
    # process's CPU (the page cache freed), which the watch window would count.
    with tempfile.NamedTemporaryFile(suffix=".json") as file:
        file.write(payload)
        file.flush()
        del payload
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT, f"{base_url}{path}", file.name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert client.stdout is not None
        client.stdout.readline()  # started and read the body
    time.sleep(0.05)  # let the loop settle, then start from a clean slate
    watch.take_longest()
    GC_PAUSES.take()
    out, _ = client.communicate("go\n", timeout=180)
    time.sleep(0.05)  # the ledger row and the history write happen just after the reply
    busy = watch.longest_busy
    lag, cpu = watch.take_longest()
    status, elapsed = out.split()
    gc_pause, gc_cpu = GC_PAUSES.take()
    return Stall(int(status), lag, cpu, float(elapsed), gc_pause, busy, gc_cpu)


# The client runs in a child process: reading a 20 MB stream or writing 31 MiB in this
# interpreter would take the interpreter lock from the gateway's loop, a stall the
# gateway does not cause. It starts, reads the body, says so, then waits for "go".
CLIENT = """
import sys, time, httpx
url, path = sys.argv[1], sys.argv[2]
payload = open(path, "rb").read()
client = httpx.Client(timeout=120)
print("ready", flush=True)
sys.stdin.readline()
started = time.perf_counter()
status = client.post(url, content=payload).status_code
print(status, time.perf_counter() - started)
"""


SIM_CONFIG = """
models:
  - {name: sim-chat, max_model_len: 1073741824}  # any input gets an answer
  - {name: sim-long, output_tokens: 160000, max_model_len: 1073741824}  # ~20 MB of SSE
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def simulator(data_dir: Path) -> Iterator[str]:
    """The simulator in a child process: its own parsing must not hold this interpreter."""
    config, port = data_dir / "sim.yaml", _free_port()
    config.write_text(SIM_CONFIG)
    command = [sys.executable, "-m", "gateway", "sim", "--port", str(port), "--config", str(config)]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/v1/models", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if child.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the simulator did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        child.terminate()
        child.wait(timeout=10)


@contextmanager
def gateway(data_dir: Path, sim_url: str) -> Iterator[tuple[str, LoopWatch]]:
    """A gateway on a real port in this process; yields its URL and its loop watch."""
    app = create_app(Settings(data_dir=data_dir), config(sim_url))
    with running(app) as server:
        watch: LoopWatch = app.state.loop_watch
        watch.cpu_clock = gateway_cpu()
        yield f"{server.url}/v1", watch


def gateway_cpu() -> Callable[[], float]:
    """The CPU time of this process less the calling thread's (the bench's, not the gateway's)."""
    bench_thread = time.pthread_getcpuclockid(threading.get_ident())
    return lambda: time.process_time() - time.clock_gettime(bench_thread)


def main() -> None:
    """Send each input to a fresh gateway and print the longest loop stall per input."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", help="run the input whose name contains this")
    parser.add_argument("--repeat", type=int, default=1, help="send each input this often")
    args = parser.parse_args()
    chosen = {n: f for n, f in INPUTS.items() if args.only is None or args.only in n}
    target = f"target {TARGET_S * 1000:.0f} ms"
    head = f"loop lag | of it, the process's CPU | CPU on the loop ({target}) | longest GC pause"
    print(f"| input | status | {head} | wall time |")
    print("|---|---|---|---|---|---|---|")
    with (
        tempfile.TemporaryDirectory() as tmp,
        simulator(Path(tmp)) as sim_url,
        gateway(Path(tmp), sim_url) as (url, watch),
    ):
        print(send(url, watch, _turns([])).row("small request (warm-up)"))
        if args.only is None or "lint" in args.only:  # a route's first call costs ~16 ms
            print(send(url, watch, _turns([]), "/prefix/lint").row("small lint (warm-up)"))
        for _ in range(args.repeat):
            for name, build in chosen.items():
                body = build(seed=time.time_ns())
                payload = body if isinstance(body, bytes) else orjson.dumps(body)
                del body  # the client's own objects are not the gateway's to collect
                print(send(url, watch, payload).row(name), flush=True)
            if args.only is None or "lint" in args.only:
                body = timestamped_log(2 * MiB, seed=time.time_ns())
                lint = send(url, watch, body, "/prefix/lint")
                print(lint.row("lint: 2 MiB log, every line a hit"), flush=True)


if __name__ == "__main__":
    main()
