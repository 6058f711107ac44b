"""The README's first call: the OpenAI SDK through Farebox, whole and streamed.

Run it with the gateway up (`make run` in another terminal):

    .venv/bin/python examples/example.py

FAREBOX_BASE_URL points it at another gateway (default http://127.0.0.1:4000/v1), and
FAREBOX_API_KEY gives it a key when the gateway checks keys (any value in open mode).
"""

from __future__ import annotations

import os

from openai import OpenAI

base_url = os.environ.get("FAREBOX_BASE_URL", "http://127.0.0.1:4000/v1")
client = OpenAI(base_url=base_url, api_key=os.environ.get("FAREBOX_API_KEY", "anything"))
messages = [{"role": "user", "content": "Hello, Farebox!"}]
reply = client.chat.completions.create(model="sim-chat", messages=messages)  # type: ignore[arg-type]
print(reply.choices[0].message.content, reply.usage, sep="\n")
stream = client.chat.completions.create(
    model="sim-thinker",
    messages=messages,  # type: ignore[arg-type]
    stream=True,
    stream_options={"include_usage": True},
)
for chunk in stream:
    print(chunk.choices[0].delta.content or "" if chunk.choices else f"\n{chunk.usage}", end="")
print()
