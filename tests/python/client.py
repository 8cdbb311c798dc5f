"""Drives one MCP server with the official MCP Python SDK and prints what it saw as one JSON object.

    .venv/bin/python tests/python/client.py URL [-H 'Authorization: Bearer fgk_...']
        [--offer 2025-06-18] [--call TOOL [--arguments '{"text": "hi"}'] [--progress] [--task TTL_MS]]
        [--oauth-client-id ID --oauth-client-secret S --oauth-issuer URL [--oauth-scope 'a b']]
        [--roots URI ...]

The scenario: initialize (the SDK's ClientSession over its Streamable HTTP transport), tools/list,
optionally one tools/call (with a progress callback when --progress; as a durable task through the
SDK's experimental tasks API when --task), then ping. With --roots the client declares the roots
capability and answers `roots/list` with those URIs (each its own root, the URI as its name). The printed object (stdout, one line):

    {"ok": true, "sdk": {"name": "mcp", "version": "1.30.0"},
     "initialize": {"protocolVersion", "serverInfo", "instructions", "capabilities"},
     "tools": [{"name", "title", "description", "inputSchema", "outputSchema", "execution"}],
     "call": {"content", "structuredContent", "isError", "progress": [{"progress", "total", "message"}],
              "task": {"taskId", "created", "statuses", "ttl"} (with --task)},
     "logs": [{"level", "logger", "data"}], "steps": ["initialize", "tools/list", ...]}

or, when a step fails, "ok": false and "error": {"step", "type", "message", and for an HTTP refusal
"status" and "wwwAuthenticate"; for a JSON-RPC error "code" and "data"}. The exit status is 0 when
the scenario completed and 1 when it failed, so a caller can assert on either. Generic on purpose:
the Node integration tests (tests/integration/python-sdk.test.mjs) run it and assert on the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import sys
import warnings
from typing import Any

import httpx

import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("-H", "--header", action="append", default=[], metavar="'Name: value'",
                   help="an HTTP header sent with every request (repeatable)")
    p.add_argument("--offer", metavar="REVISION",
                   help="the protocol revision to offer in initialize (default: the SDK's latest)")
    p.add_argument("--call", metavar="TOOL", help="call this tool after tools/list")
    p.add_argument("--arguments", default="{}", metavar="JSON", help="the tool's arguments (a JSON object)")
    p.add_argument("--progress", action="store_true", help="ask for progress notifications (a progress callback)")
    p.add_argument("--task", type=int, metavar="TTL_MS",
                   help="run the call as a durable task (tools/call with params.task, tasks/get, tasks/result)")
    p.add_argument("--oauth-client-id", metavar="ID",
                   help="authenticate with OAuth 2.1 client credentials: the SDK discovers the "
                        "authorization server from the server's 401 and its protected resource metadata")
    p.add_argument("--oauth-client-secret", metavar="SECRET", default="")
    p.add_argument("--oauth-issuer", metavar="URL", help="the issuer the client credentials belong to")
    p.add_argument("--oauth-scope", metavar="SCOPES", help="space-separated scopes to ask for")
    p.add_argument("--roots", nargs="+", metavar="URI",
                   help="declare the roots capability and answer roots/list with these URIs")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds for the whole scenario")
    return p.parse_args(argv)


def headers_of(specs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, value = spec.partition(":")
        if not sep or not name.strip():
            raise SystemExit(f"client.py: a header is 'Name: value', got {spec!r}")
        out[name.strip()] = value.strip()
    return out


def dump(model: Any) -> Any:
    """A pydantic model (or a list of them) as plain JSON data, aliases as on the wire."""
    if isinstance(model, list):
        return [dump(m) for m in model]
    if hasattr(model, "model_dump"):
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return model


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, which anyio's task groups raise."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def describe_error(exc: BaseException, step: str) -> dict[str, Any]:
    found = leaves(exc)
    # The most telling one: an HTTP status or a JSON-RPC error over a cancellation or a timeout.
    pick = next((e for e in found if isinstance(e, httpx.HTTPStatusError)), None) \
        or next((e for e in found if isinstance(e, McpError)), None) \
        or found[0]
    err: dict[str, Any] = {"step": step, "type": type(pick).__name__, "message": str(pick)}
    if isinstance(pick, httpx.HTTPStatusError):
        res = pick.response
        err["status"] = res.status_code
        err["wwwAuthenticate"] = res.headers.get("www-authenticate")
        try:  # read by read_error_body while the response was open
            err["body"] = json.loads(res.content)
        except Exception:  # not read, or not JSON
            pass
    elif isinstance(pick, McpError):
        err["code"] = pick.error.code
        if pick.error.data is not None:
            err["data"] = pick.error.data
    return err


async def read_error_body(response: httpx.Response) -> None:
    """Keeps a refusal's body (the transport raises before reading it), for the report."""
    if response.status_code >= 400:
        await response.aread()


async def scenario(args: argparse.Namespace, out: dict[str, Any], progress_state: dict[str, str]) -> None:
    headers = headers_of(args.header)
    logs: list[dict[str, Any]] = []
    out["logs"] = logs
    steps: list[str] = []
    out["steps"] = steps

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(dump(params))

    http = httpx.AsyncClient(
        headers=headers,
        timeout=httpx.Timeout(30.0, read=300.0),
        event_hooks={"response": [read_error_body]},
        auth=oauth_provider(args),
    )
    async with http, streamable_http_client(args.url, http_client=http) as (read, write, _):
        roots_asked: list[str] = []
        out["rootsAsked"] = roots_asked

        async def on_list_roots(_context: Any) -> types.ListRootsResult:
            roots_asked.append("roots/list")
            return types.ListRootsResult(roots=[types.Root(uri=u, name=u) for u in args.roots])

        list_roots = on_list_roots if args.roots else None
        async with ClientSession(read, write, logging_callback=on_log, list_roots_callback=list_roots) as session:
            progress_state["step"] = "initialize"
            init = await session.initialize()
            steps.append("initialize")
            out["initialize"] = {
                "protocolVersion": init.protocolVersion,
                "serverInfo": dump(init.serverInfo),
                "instructions": init.instructions,
                "capabilities": dump(init.capabilities),
            }

            progress_state["step"] = "tools/list"
            listed = await session.list_tools()
            steps.append("tools/list")
            out["tools"] = dump(listed.tools)

            if args.call:
                arguments = json.loads(args.arguments)
                call: dict[str, Any] = {}
                out["call"] = call
                if args.task is not None:
                    progress_state["step"] = "tools/call (task)"
                    call["task"] = await run_as_task(session, args.call, arguments, args.task)
                    result = call["task"].pop("result")
                else:
                    progress_state["step"] = "tools/call"
                    progress: list[dict[str, Any]] = []
                    call["progress"] = progress

                    async def on_progress(p: float, total: float | None, message: str | None) -> None:
                        progress.append({"progress": p, "total": total, "message": message})

                    result = await session.call_tool(
                        args.call, arguments, progress_callback=on_progress if args.progress else None
                    )
                steps.append("tools/call")
                call.update(dump(result))
                # Always present, even when the server left them out (false/none are meaningful).
                call.setdefault("structuredContent", None)
                call["isError"] = bool(result.isError)

            progress_state["step"] = "ping"
            await session.send_ping()
            steps.append("ping")


class MemoryTokenStorage:
    """The SDK's TokenStorage, for one run: nothing is written to disk."""

    def __init__(self) -> None:
        self.tokens: Any = None
        self.client_info: Any = None

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client_info

    async def set_client_info(self, client_info: Any) -> None:
        self.client_info = client_info


def oauth_provider(args: argparse.Namespace) -> httpx.Auth | None:
    """The SDK's client-credentials provider when --oauth-client-id is given."""
    if not args.oauth_client_id:
        return None
    from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

    return ClientCredentialsOAuthProvider(
        server_url=args.url,
        storage=MemoryTokenStorage(),
        client_id=args.oauth_client_id,
        client_secret=args.oauth_client_secret,
        scopes=args.oauth_scope,
        issuer=args.oauth_issuer,
    )


async def run_as_task(session: ClientSession, tool: str, arguments: dict[str, Any], ttl: int) -> dict[str, Any]:
    # The SDK's tasks API is experimental (and deprecated in 1.2x ahead of 2.0, where tasks move
    # to an extension); it is what the SDK offers for 2025-11-25 tasks today.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        tasks = session.experimental
    created = await tasks.call_tool_as_task(tool, arguments, ttl=ttl)
    statuses = [created.task.status]
    async for status in tasks.poll_task(created.task.taskId):
        statuses.append(status.status)
    result = await tasks.get_task_result(created.task.taskId, types.CallToolResult)
    return {
        "taskId": created.task.taskId,
        "created": dump(created.task),
        "ttl": created.task.ttl,
        "statuses": statuses,
        "relatedTask": (result.meta or {}).get("io.modelcontextprotocol/related-task"),
        "result": result,
    }


async def main(argv: list[str]) -> int:
    args = parse_args(argv)
    out: dict[str, Any] = {"ok": False, "sdk": {"name": "mcp", "version": importlib.metadata.version("mcp")}}
    if args.offer:
        # ClientSession.initialize offers mcp.types.LATEST_PROTOCOL_VERSION, read at call time;
        # the SDK has no option for it (the TypeScript tests rewrite the request body instead).
        types.LATEST_PROTOCOL_VERSION = args.offer
    state = {"step": "connect"}
    try:
        await asyncio.wait_for(scenario(args, out, state), timeout=args.timeout)
        out["ok"] = True
    except asyncio.TimeoutError:
        out["error"] = {"step": state["step"], "type": "TimeoutError",
                        "message": f"the scenario did not finish within {args.timeout} s"}
    except Exception as exc:  # anyio raises ExceptionGroups; describe_error unwraps them
        out["error"] = describe_error(exc, state["step"])
    print(json.dumps(out))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
