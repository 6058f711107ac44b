"""CPU of the prefix check of a 1 MB fresh prompt, two checkouts alternating.

Run: `python bench/prefix_fresh.py --src BASE [--pairs 5] [-n 40]`. Each run is a child
process of one checkout (this one, or `--src`, with its own natives) that checks loadgen's
fresh prompt (bench/hotpath_load.py's 1 MB history, its system prompt's mark changed each
request) `n` times against the caller's last four records, as the pipeline does (`raw`
passed: the messages are the parse's, unedited), then makes the record ready for the store
(`to_dict`, after the reply in the pipeline: timed apart). It prints the median and min of
`time.process_time` per check, ms, and the median of `to_dict`; the two
trees alternate, base first, then this one, for `--pairs` pairs.

`--one [--src DIR]` runs one child's measurement and prints it as JSON. `--count N` runs
N checks (after four first sights) untimed, for an instruction count: the bodies are made
for 24 checks whatever N, so two values' difference is what their checks cost:

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/prefix_fresh.py \
        --count 1 [--src DIR]   # then --count 6: (I(6) - I(1)) / 5 per check
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parents[1]
COUNTED = 24  # bodies made for `--count`, whatever its N


def measure(src: str | None, n: int, timed: bool = True) -> dict[str, float]:
    """ms of CPU per fresh check (median, min), in this process, for `src`'s gateway."""
    from checkout import use_checkout

    use_checkout(src)
    import gc

    import orjson
    from hotpath_load import write_history

    from gateway.prefix import PrefixChecker, rule_for

    history = write_history(Path(tempfile.mkdtemp(prefix="prefix-fresh-")) / "h.json")
    messages = orjson.dumps(json.loads(history.read_text()))[1:-1]

    def body(i: int) -> bytes:
        last = b'{"role":"user","content":"Next step %d: continue."}' % i
        msgs = messages.replace("§N§".encode(), str(i).encode()) + b"," + last
        return b'{"model":"bench-gpt","messages":[' + msgs + b'],"max_tokens":64}'

    rule, checker = rule_for("openai"), PrefixChecker()
    bodies = [(raw, orjson.loads(raw)) for raw in map(body, range(max(n + 4, COUNTED)))]
    bodies = bodies[: n + 4]
    gc.freeze()  # as `farebox serve` does: the collections walk only what requests make
    history_records: list = []  # type: ignore[type-arg]
    times: list[float] = []
    stored: list[float] = []
    for i, (raw, parsed) in enumerate(bodies):
        started = time.process_time()
        check = checker.check(parsed, rule, history_records, raw=raw)
        checked = time.process_time()
        check.record.to_dict()
        if i >= 4:  # the first are first sights: nothing to compare with yet
            times.append((checked - started) * 1000)
            stored.append((time.process_time() - checked) * 1000)
        history_records = [check.record, *history_records[:3]]
    if not timed:
        return {}
    return {
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "to_dict_median_ms": statistics.median(stored),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--src", help="the base checkout (its natives built)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("-n", type=int, default=40)
    parser.add_argument("--one", action="store_true", help="one measurement, as JSON")
    parser.add_argument("--count", type=int, help="run N checks untimed (callgrind)")
    args = parser.parse_args()
    if args.count is not None:
        measure(args.src, args.count, timed=False)
        return
    if args.one:
        print(json.dumps(measure(args.src, args.n)))
        return
    trees = {"base": args.src, "this": None}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.pairs):
        for name, src in trees.items():
            cmd = [sys.executable, __file__, "--one", "-n", str(args.n)]
            cmd += ["--src", src] if src else []
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
            results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(name, results[name][-1], flush=True)
    for name, runs in results.items():
        medians = sorted(round(r["median_ms"], 3) for r in runs)
        print(f"{name}: medians {medians}, median of medians {statistics.median(medians):.3f}")
    ratios = [
        t["median_ms"] / b["median_ms"]
        for b, t in zip(results["base"], results["this"], strict=True)
    ]
    print("this/base per pair:", [round(r, 3) for r in ratios])


if __name__ == "__main__":
    main()
