"""Dependencies shared by the routers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.errors import LedgerUnavailableError
from gateway.ledger.reads import catch_up, ledger_down
from gateway.services import Services

log = logging.getLogger("farebox")


async def get_services(request: Request) -> Services:
    """The process's services, built by the lifespan.

    Async on purpose: FastAPI runs a plain `def` dependency in its thread pool, a thread
    hop per request for one attribute read.
    """
    services: Services = request.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def ledger_engine(services: ServicesDep) -> AsyncIterator[AsyncEngine]:
    """The ledger for a read, caught up with this process's writes; an outage is a 503.

    The one place database failures of the read routes are mapped: whatever the route
    runs after `yield` fails through here too.
    """
    try:
        await catch_up(services.ledger, services.engine)
        yield services.engine
    except ledger_down() as exc:
        log.warning("ledger read failed, answering 503: %s: %s", type(exc).__name__, exc)
        raise LedgerUnavailableError(
            "the ledger database is unreachable; requests are still served and recorded "
            "(they wait in the spool), retry the read shortly"
        ) from exc


LedgerDep = Annotated[AsyncEngine, Depends(ledger_engine)]
