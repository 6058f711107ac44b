"""GET /ui and its assets: the cost explorer page, shipped in the package, no CDN.

The page holds no data: it is public, like `/healthz`, and its script reads the JSON
routes with the key the user types (kept in the tab's sessionStorage), so every number
it shows is scoped to that key (docs/explorer.md). Only the files listed in `ASSETS`
are served; a strict Content-Security-Policy keeps the page to its own origin.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse

router = APIRouter()

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {
    "app.js": "text/javascript",
    "app.css": "text/css",
    "vendor/uplot.iife.min.js": "text/javascript",
    "vendor/uplot.min.css": "text/css",
    "vendor/LICENSE.uplot": "text/plain",
}
HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


@router.get("/ui", include_in_schema=False)
async def page() -> FileResponse:
    """The explorer page."""
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=HEADERS)


@router.get("/ui/{asset:path}", include_in_schema=False)
async def asset(asset: str) -> FileResponse:
    """One of the page's scripts or stylesheets (`/ui/` is the page); nothing else."""
    if asset == "":
        return await page()
    media_type = ASSETS.get(asset)
    if media_type is None:
        raise HTTPException(404, "no such file of the explorer page")  # OpenAI-shaped 404
    return FileResponse(STATIC / asset, media_type=media_type, headers=HEADERS)
