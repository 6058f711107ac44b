"""docs/budgets.md's example runs as written and prints what the page says it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_budgets_page_example_prints_what_it_says() -> None:
    page = (ROOT / "docs" / "budgets.md").read_text()
    code = re.search(r"```python\n(.*?)```", page, re.S)
    printed = re.search(r"\nprints\n\n    (.*?)\n", page)
    assert code is not None and printed is not None
    run = subprocess.run(
        [sys.executable, "-c", code.group(1)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert run.stdout.strip() == printed.group(1)
