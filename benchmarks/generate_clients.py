"""The /generate clients measured against ours (gspo_agents/rollout/sglang_generate.py) in one
run of benchmarks/rollout_scale.py --clients: the same interface over httpx and aiohttp, with
transport errors mapped the way the engine needs them (not sent / may have arrived)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

try:
    from gspo_agents.rollout.sglang_generate import GenerateLost, GenerateNotSent
except ImportError:  # a checkout from before it (the "before" rows): only "ours" runs there
    GenerateLost = GenerateNotSent = RuntimeError  # type: ignore[misc, assignment]


class HttpxClient:
    """What SGLangEngine used before: one httpx.AsyncClient, a pool of max_connections."""

    def __init__(
        self, *, connect_timeout_s: float, keepalive_expiry_s: float, max_connections: int
    ):
        import httpx

        self._httpx = httpx
        self.on_request: list = []
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=connect_timeout_s, pool=None),
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                keepalive_expiry=keepalive_expiry_s,
            ),
        )

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
        httpx = self._httpx
        try:
            resp = await self._client.post(url, content=bytes(body), headers=dict(headers))
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise GenerateNotSent(str(exc)) from exc
        except httpx.TransportError as exc:
            raise GenerateLost(str(exc)) from exc
        return resp.status_code, resp.content

    async def aclose(self) -> None:
        await self._client.aclose()


class AiohttpClient:
    """aiohttp: a C parser and an O(1) pool per host (pip install aiohttp)."""

    def __init__(
        self, *, connect_timeout_s: float, keepalive_expiry_s: float, max_connections: int
    ):
        import aiohttp

        self._aiohttp = aiohttp
        self.on_request: list = []
        self._args = (connect_timeout_s, keepalive_expiry_s, max_connections)
        self._session = None

    def _open(self):
        aiohttp = self._aiohttp
        connect_s, keepalive_s, most = self._args
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=0, limit_per_host=most, keepalive_timeout=keepalive_s
            ),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_s),
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
        )
        return self._session

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
        aiohttp = self._aiohttp
        session = self._session or self._open()
        try:
            async with session.post(url, data=bytes(body), headers=headers) as resp:
                return resp.status, await resp.read()
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            raise GenerateNotSent(str(exc)) from exc
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise GenerateLost(str(exc)) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


CLIENTS = {"aiohttp": AiohttpClient, "httpx": HttpxClient}


def install(engine, name: str, max_connections: int = 4096) -> None:
    """Give `engine` (an SGLangEngine) the /generate client `name`; "ours" keeps its own (on
    an older checkout, whatever that was: rollout_scale.py then measures it as it stood)."""
    if name == "ours":
        return
    engine._gen = CLIENTS[name](
        connect_timeout_s=5.0, keepalive_expiry_s=4.0, max_connections=max_connections
    )
