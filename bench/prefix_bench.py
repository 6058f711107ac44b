"""Benchmark the per-request prefix check on ~1 MB prompts.

Run: `python bench/prefix_bench.py` (`--quick` for fewer rounds, `--no-write` to skip
writing bench/results/prefix.md). Each round gets a freshly parsed body, as the pipeline
hands each request over; times cover segmenting, digesting, scanning and comparing, not
JSON parsing. The dev box is shared and noisy, so min, median and p95 are all reported;
the verdict uses the median. The scan cases also run in a child process with the native
locator turned off (`FAREBOX_PREFIX_NATIVE=0`), in the same run, for the ratio.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

import orjson

try:
    from gateway.prefix import CacheRule, PrefixChecker, PrefixRecord, ScanCache, rule_for
except ImportError:  # not installed: run from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from gateway.prefix import CacheRule, PrefixChecker, PrefixRecord, ScanCache, rule_for
from gateway.prefix.detectors import HOT_PATH_SCAN_BUDGET
from gateway.prefix.locate import NATIVE

Body = dict[str, Any]
Row = tuple[str, float, float, float, str]
RESULTS = Path(__file__).resolve().parent / "results" / "prefix.md"
TARGET_MS = 2.0
_WORDS = ("the", "agent", "reads", "a", "file", "then", "calls", "tool", "and", "writes", "report")


def _prose(rng: random.Random, size: int) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def _code(rng: random.Random, size: int) -> str:
    lines: list[str] = []
    while sum(map(len, lines)) < size:
        n = rng.randint(0, 999)
        lines.append(f"    def handler_{n}(self, item: dict) -> int:\n")
        lines.append(f"        return item['count'] + {n}\n")
    return "".join(lines)


def _json_rows(rng: random.Random, size: int) -> str:
    rows: list[str] = []
    length = 0
    while length < size:
        n = rng.randint(1, 99_999)
        row = f'{{"id": {n}, "name": "item {n}", "price": {n / 100:.2f}, "qty": {n % 50}}}'
        rows.append(row)
        length += len(row) + 2
    return "[" + ", ".join(rows) + "]"


def _tool_call(step: int) -> Body:
    call = {"name": "read_file", "arguments": '{"path": "src/app.py"}'}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"call_{step}", "type": "function", "function": call}],
    }


def agent_body(total_bytes: int = 1_000_000, chunk: int = 4_800, seed: int = 7) -> Body:
    """Return a ~1 MB agent conversation: system, tools, tool calls and their outputs.

    With the default `chunk` that is ~400 messages; a larger chunk gives fewer, larger
    ones. A closing user turn makes the whole history cacheable, so all of it is scanned.
    """
    rng = random.Random(seed)
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": _prose(rng, 300),
                "parameters": schema,
            },
        }
        for i in range(12)
    ]
    messages: list[Body] = [{"role": "system", "content": _prose(rng, 20_000)}]
    messages.append({"role": "user", "content": _prose(rng, 2_000)})
    size, step = 26_000, 0
    while size < total_bytes:
        output = (_prose, _code, _json_rows)[step % 3](rng, chunk)
        messages.append(_tool_call(step))
        messages.append({"role": "tool", "tool_call_id": f"call_{step}", "content": output})
        size += len(output) + 200
        step += 1
    messages.append({"role": "user", "content": "Summarise what you found so far."})
    return {"model": "gpt-5", "tools": tools, "messages": messages}


def next_turn(body: Body, n: int) -> Body:
    """Return the body one turn later: the same history plus an answer and a new question."""
    answer = {"role": "assistant", "content": f"Step {n} done. {_prose(random.Random(n), 400)}"}
    question = {"role": "user", "content": f"Step {n + 1}: continue with the next file."}
    return {**body, "messages": [*body["messages"], answer, question]}


def _stats(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return ordered[0], statistics.median(ordered), p95


def _timed(calls: Iterable[Callable[[], object]]) -> tuple[float, float, float]:
    """Return (min, median, p95) milliseconds over the calls."""
    samples = []
    for call in calls:
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return _stats(samples)


def parsed(body: Body) -> Body:
    """Return a freshly parsed copy, as the pipeline hands each request over (cold objects)."""
    result: Body = orjson.loads(orjson.dumps(body))
    return result


def _fresh(body: Body, rounds: int, call: Callable[[Body], object]) -> tuple[float, float, float]:
    """Time `call` on a freshly parsed copy of `body` each round."""
    copies = [parsed(body) for _ in range(rounds)]
    return _timed([partial(call, copy) for copy in copies])


def agent_turns(body: Body, rounds: int) -> list[Body]:
    """Return `rounds` consecutive turns after `body`, each freshly parsed."""
    turns = []
    for n in range(rounds):
        body = next_turn(body, n)
        turns.append(parsed(body))
    return turns


def _steady(body: Body, rule: CacheRule, rounds: int) -> tuple[float, float, float]:
    """Time agent turns over a warm checker, each compared with the last eight records."""
    checker = PrefixChecker()
    history: list[PrefixRecord] = [checker.check(body, rule).record]
    turns = agent_turns(body, rounds)
    samples = []
    for turn in turns:
        start = time.perf_counter()
        result = checker.check(turn, rule, history[-8:])
        samples.append((time.perf_counter() - start) * 1000)
        history.append(result.record)
    return _stats(samples)


def _volatile(rule: CacheRule, rounds: int) -> tuple[float, float, float]:
    """Time a 1 MB system prompt whose first line carries a new timestamp every request."""
    text = _prose(random.Random(3), 1_000_000)
    checker = PrefixChecker(cache=ScanCache())

    def body(n: int) -> Body:
        stamp = f"Now: 2026-03-12T14:{n // 60:02d}:{n % 60:02d}Z"
        system = {"role": "system", "content": f"{stamp} {text}"}
        return {"model": "gpt-5", "messages": [system, {"role": "user", "content": "hi"}]}

    previous = checker.check(body(0), rule).record
    samples = []
    for n in range(1, rounds + 1):
        request = parsed(body(n))
        start = time.perf_counter()
        previous = checker.check(request, rule, [previous]).record
        samples.append((time.perf_counter() - start) * 1000)
    return _stats(samples)


def tool_loop(system: str, outputs: Callable[[int], str], question: str, total: int) -> Body:
    """Return an agent conversation of tool calls and their outputs, ~`total` bytes."""
    messages: list[Body] = [{"role": "system", "content": system}]
    size, step = 0, 0
    while size < total:
        output = outputs(step)
        call = {"role": "tool", "tool_call_id": f"call_{step}", "content": output}
        messages += [_tool_call(step), call]
        size += len(output) + 200
        step += 1
    messages.append({"role": "user", "content": question})
    return {"model": "gpt-5", "messages": messages}


def log_body(total_bytes: int = 1_000_000, seed: int = 5) -> Body:
    """Return an agent conversation whose tool outputs are log lines, a timestamp on each."""
    rng = random.Random(seed)

    def lines(_: int) -> str:
        return "\n".join(
            f"2026-03-12T14:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{n:03d}Z INFO "
            f"worker-{rng.randint(1, 8)} handled request {rng.randint(1, 99_999)} in "
            f"{rng.randint(1, 400)} ms"
            for n in range(60)
        )

    return tool_loop(_prose(rng, 2_000), lines, "Which worker failed first?", total_bytes)


def image_body(total_bytes: int = 1_000_000, seed: int = 6) -> Body:
    """Return a chat whose history holds a ~1 MB base64 image (a data URL)."""
    image = base64.b64encode(random.Random(seed).randbytes(total_bytes * 3 // 4)).decode()
    parts = [
        {"type": "text", "text": "What is on this screenshot?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
    ]
    return {
        "model": "gpt-5",
        "messages": [
            {"role": "system", "content": "You describe screenshots."},
            {"role": "user", "content": parts},
            {"role": "assistant", "content": "A terminal with a failing test."},
            {"role": "user", "content": "Which test?"},
        ],
    }


def numbers_body(total_bytes: int = 1_000_000, seed: int = 8) -> Body:
    """Return tool outputs dense with 7- to 13-digit numbers (ids, phone numbers, sizes)."""
    rng = random.Random(seed)

    def rows(_: int) -> str:
        return json.dumps([[rng.randint(10**6, 10**13) for _ in range(8)] for _ in range(60)])

    return tool_loop("You audit exports.", rows, "Any duplicates?", total_bytes)


def _first_seen(body: Body, rule: CacheRule, rounds: int, budget: int | None) -> Row:
    """Time a cold check (empty scan cache, no history); note what the budget left."""
    copies = [parsed(body) for _ in range(rounds)]
    left: list[int] = []

    def call(copy: Body) -> None:
        left.append(len(PrefixChecker(scan_budget=budget).check(copy, rule).unscanned))

    low, median, p95 = _timed([partial(call, copy) for copy in copies])
    segments = len(PrefixChecker().fingerprint(body, rule).segment_names)
    scope = "full scan" if budget is None else f"{budget // 1024} KiB budget"
    return ("", low, median, p95, f"{scope}; {max(left)} of {segments} segments left unscanned")


def _stage(body: Body, rule: CacheRule, rounds: int) -> tuple[float, float, float]:
    """Time an agent step as the pipeline runs it against Redis, less the round trip.

    The four newest records arrive as the JSON the store keeps and are parsed; the check
    runs; the new record is serialised for the store.
    """
    checker = PrefixChecker()
    stored = [orjson.dumps(checker.check(body, rule).record.to_dict())]
    turns = agent_turns(body, rounds)
    samples = []
    for turn in turns:
        start = time.perf_counter()
        history = [PrefixRecord.from_dict(orjson.loads(blob)) for blob in stored[:4]]
        result = checker.check(turn, rule, history)
        stored.insert(0, orjson.dumps(result.record.to_dict()))
        samples.append((time.perf_counter() - start) * 1000)
    return _stats(samples)


def _named(name: str, row: Row) -> Row:
    return (name, *row[1:])


def scan_rows(rounds: int) -> list[Row]:
    """The cases that scan first-seen content: these depend on the native locator.

    Each content is checked twice: scanned whole (what it costs) and under the default
    per-request budget (what a request pays; the rest waits for later requests).
    """
    rule = rule_for("openai")
    contents = {
        "first-seen 1 MB agent history": agent_body(),
        "first-seen 1 MB of log lines, a timestamp each": log_body(),
        "first-seen 1 MB base64 image in history": image_body(),
        "first-seen 1 MB of 7-13 digit numbers": numbers_body(),
    }
    rows = []
    for name, body in contents.items():
        rows.append(_named(name, _first_seen(body, rule, rounds, None)))
        rows.append(_named(name, _first_seen(body, rule, rounds, HOT_PATH_SCAN_BUDGET)))
    return rows


def run(rounds: int) -> list[Row]:
    """Return (case, min ms, median ms, p95 ms, note) rows."""
    rule = rule_for("openai")
    many, few = agent_body(), agent_body(chunk=48_000)
    sizes = {"many": len(many["messages"]), "few": len(few["messages"])}
    fp = PrefixChecker()
    return [
        (
            f"fingerprint only, 1 MB in {sizes['many']} messages",
            *_fresh(many, rounds, lambda b: fp.fingerprint(b, rule)),
            "segment + digest; no scan, no compare",
        ),
        (
            f"fingerprint only, 1 MB in {sizes['few']} messages",
            *_fresh(few, rounds, lambda b: fp.fingerprint(b, rule)),
            "segment + digest; no scan, no compare",
        ),
        *scan_rows(rounds),
        (
            f"steady state: {sizes['many']}-message 1 MB history + new turn",
            *_steady(many, rule, rounds),
            "warm scan cache, 8 records of history",
        ),
        (
            f"steady state: {sizes['few']}-message 1 MB history + new turn",
            *_steady(few, rule, rounds),
            "warm scan cache, 8 records of history",
        ),
        (
            f"whole stage: {sizes['many']}-message agent step, history as stored JSON",
            *_stage(many, rule, rounds),
            "4 records parsed from JSON + check + new record serialised (no network)",
        ),
        (
            "1 MB system prompt with a new timestamp each request",
            *_volatile(rule, rounds),
            "one 32 KiB window rescanned",
        ),
    ]


def pure_python_rows(rounds: int) -> list[Row]:
    """Run `scan_rows` in a child process with the native locator turned off."""
    env = {**os.environ, "FAREBOX_PREFIX_NATIVE": "0"}
    command = [sys.executable, __file__, "--scan-rows-json", "--rounds", str(rounds)]
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return [tuple(row) for row in json.loads(output)]


def comparison(native: list[Row], pure: list[Row]) -> str:
    """Return the native and pure-Python medians of the scan cases side by side."""
    lines = [
        "| case | native: median ms, note | pure Python: median ms, note | speed-up |",
        "|---|---|---|---:|",
    ]
    for fast, slow in zip(native, pure, strict=True):
        # Only whole scans do the same work; budgeted ones differ in what they leave.
        same_work = fast[4].startswith("full scan")
        ratio = f"{slow[2] / fast[2]:.1f}x" if same_work else "-"
        lines.append(
            f"| {fast[0]} | {fast[2]:.2f}, {fast[4]} | {slow[2]:.2f}, {slow[4]} | {ratio} |"
        )
    return "\n".join(lines)


def table(rows: list[Row]) -> str:
    """Return the rows as a Markdown table."""
    lines = [
        "| case | min ms | median ms | p95 ms | median < 2 ms | note |",
        "|---|---:|---:|---:|:---:|---|",
    ]
    for case, low, median, p95, note in rows:
        ok = "yes" if median < TARGET_MS else "no"
        lines.append(f"| {case} | {low:.2f} | {median:.2f} | {p95:.2f} | {ok} | {note} |")
    return "\n".join(lines)


def machine() -> str:
    """Return a one-line description of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{cpu}, {os.cpu_count()} CPUs, load average {load:.2f} at start, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )


def main() -> None:
    """Run the benchmark, print the tables and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="5 rounds instead of 30")
    parser.add_argument("--no-write", action="store_true", help="do not write the results file")
    parser.add_argument("--rounds", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--scan-rows-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    rounds = args.rounds or (5 if args.quick else 30)
    if args.scan_rows_json:  # the child process of pure_python_rows
        print(json.dumps(scan_rows(rounds)))
        return
    if not NATIVE:
        sys.exit("the native locator is not built (pip install -e . needs a C compiler)")
    about = machine()
    rows = run(rounds)
    pure = pure_python_rows(rounds)
    native = [row for row in rows if row[0].startswith("first-seen")]
    result = f"{table(rows)}\n\nThe scan cases with the native locator off, same run:\n\n"
    result += comparison(native, pure)
    print(result)
    if not args.no_write:
        command = "python bench/prefix_bench.py" + (" --quick" if args.quick else "")
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(
            f"# Prefix check benchmark\n\nCommand: `{command}` ({rounds} rounds per case)\n\n"
            f"Machine: {about}\n\n{result}\n",
            encoding="utf-8",
        )


if __name__ == "__main__":
    main()
