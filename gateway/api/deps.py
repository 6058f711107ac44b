"""Dependencies shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gateway.services import Services


def get_services(request: Request) -> Services:
    """The process's services, built by the lifespan."""
    services: Services = request.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]
