"""Calls one tool with the MCP Python SDK 2.x default client, answering what the server asks
meanwhile (sampling, elicitation, roots), and prints one JSON object: the protocol revision the
client spoke, the tool's result text, whether it was an error, and what it was asked.

tests/integration/upstream-bridge.test.mjs runs it against an upstream directly (a 2025 server:
its requests come during the call) and through Flowgate (2026-07-28: input_required rounds).

usage: asking_client.py URL TOOL ARGUMENTS_JSON [--declare sampling,elicitation,roots]
"""

import argparse
import asyncio
import json
import sys

from mcp import Client
from mcp_types import CreateMessageResult, ElicitResult, ListRootsResult, Root, TextContent


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("tool")
    parser.add_argument("arguments")
    parser.add_argument("--declare", default="sampling,elicitation,roots")
    parser.add_argument("--timeout", type=float, default=60)
    a = parser.parse_args()
    declared = set(filter(None, a.declare.split(",")))
    asked: list[dict] = []

    async def sampling(context, params):
        asked.append({"method": "sampling/createMessage", "maxTokens": params.max_tokens})
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text="sampled by the client"), model="m", stop_reason="endTurn"
        )

    async def elicitation(context, params):
        asked.append({"method": "elicitation/create", "message": params.message})
        return ElicitResult(action="accept", content={"username": "ada", "email": "ada@example.com"})

    async def roots(context):
        asked.append({"method": "roots/list"})
        return ListRootsResult(roots=[Root(uri="file:///work/project", name="project")])

    out: dict = {"ok": False}
    try:
        async with asyncio.timeout(a.timeout), Client(
            a.url,
            sampling_callback=sampling if "sampling" in declared else None,
            elicitation_callback=elicitation if "elicitation" in declared else None,
            list_roots_callback=roots if "roots" in declared else None,
        ) as client:
            result = await client.call_tool(a.tool, json.loads(a.arguments))
            out = {
                "ok": True,
                "protocol": client.protocol_version,
                "text": "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text"),
                "isError": bool(result.is_error),
                "asked": asked,
            }
    except BaseException as e:  # noqa: BLE001 - reported as JSON for the test to show
        out = {"ok": False, "error": f"{type(e).__name__}: {e}", "asked": asked}
    print(json.dumps(out))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
