"""OpenAI's Responses API, spoken natively: `POST {base_url}/responses`.

Used by `/v1/responses` for routes with `wire: responses` (OpenAI, vLLM's Responses
server, the simulator): the client's bytes go out with only the policy's edits; replies
are checked to be JSON objects and passed on as sent; streams are relayed event by event.
The route's key goes in `Authorization: Bearer`, never the client's.
"""

from __future__ import annotations

from gateway.upstream.http_stream import HttpClient
from gateway.upstream.openai_paths import OpenAIPathUpstream

PATH = "/responses"


class ResponsesUpstream(OpenAIPathUpstream):
    """Sends Responses API calls to `{base_url}/responses`."""

    def __init__(self, client: HttpClient):
        super().__init__(client, PATH)
