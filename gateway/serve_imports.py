"""What `farebox serve` keeps out of the serving process; imported first by gateway.cli.

httpx imports its command-line module (`httpx._main`: click's rich help, rich, pygments)
whenever those are installed, as they are beside typer: 1.5 MiB of RSS and ~15 ms of CPU
in every gateway process (measured: the app's imports 104.8 -> 103.3 MiB), for
`httpx.main`, which the gateway never calls. Marking the module absent before the first
`import httpx` leaves httpx its fallback `main` (it says to install `httpx[cli]`). Only
for `farebox serve`: any other command line, and an importing test, gets httpx as it is.
"""

from __future__ import annotations

import sys

if sys.argv[1:2] == ["serve"] and "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
