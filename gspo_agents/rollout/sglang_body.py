"""The /generate request body built from a cached, JSON-encoded `input_ids` prefix (issue 33).

An agent episode's token ids only grow turn by turn (token-in/token-out: the manager never
re-renders or re-tokenises history), so re-serialising the whole history every turn made a turn
cost linear in history (quadratic per episode). Here each episode (the engine's route key) keeps
the encoded bytes of the ids it last sent; a turn encodes only the ids appended since.

Exactness first: the cached prefix is used only when the new ids start with exactly the ids it
encodes. For the RolloutManager's ids (a TokenHistory, engine.py: a list that can only grow)
that is the same object come back no shorter, an O(1) check; nothing of the history is copied
or compared per turn. Any other list is compared with the ids last sent (a C-level list
comparison, no Python loop and no re-encoding). Anything else (a broken episode, a retried
prefix, another caller on the same key) re-encodes from scratch. The bytes are
byte-for-byte `json.dumps(generate_body(...), separators=(",", ":"))`, so the wire stays what
SGLang 0.5.23's GenerateReqInput parses (tests/test_sglang_body.py checks both).

SGLang 0.5.23 has sessions (`/open_session`, GenerateReqInput.session_params with
rid/offset/replace/drop_previous_output, io_struct.SessionParams): the server keeps the context
and a request sends only the new tokens. Not used: that context lives on one worker, so failover
to another worker, a retry after an abort, a pause that drops a request, or a worker restart
would need the whole history again anyway, and exactness would rest on the server's copy of our
ids. We keep sending the full ids (the radix cache still reuses the KV) and make only the
encoding incremental.
"""

from __future__ import annotations

import functools
import json
import operator
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from gspo_agents.rollout.engine import SamplingParams, TokenHistory
from gspo_agents.rollout.sglang_wire import generate_rest

try:  # 5x faster on a list of ints than the C json encoder (same bytes); optional
    import orjson
except ImportError:  # pragma: no cover - a platform without its wheel
    orjson = None  # type: ignore[assignment]  # the json fallback below

_HEAD = b'{"input_ids":['
_INT = {int}


def _as_index(obj: Any) -> int:
    """Token ids that are not Python ints (numpy's, torch's) encode as their integer value."""
    try:
        if isinstance(obj, bool):  # operator.index takes a bool; no token id is one
            raise TypeError
        return operator.index(obj)
    except TypeError:
        raise TypeError(
            f"a token id must be an integer, got {type(obj).__name__}: {obj!r}"
        ) from None


def _compact_encoder() -> Callable[[Any], str] | None:
    """The C encoder json.dumps(separators=(",", ":")) builds on every call, built once (2-3x
    less CPU per turn on small bodies); None where the C accelerator is missing, or where it does
    not give json.dumps' bytes."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    try:
        enc = make(
            None,
            _as_index,
            json.encoder.encode_basestring_ascii,
            None,
            ":",
            ",",
            False,
            False,
            True,
        )
        probe: Any = {"a": [1, -2, 3.5, None, True, "x\u00e9\n"], "b": {"c": []}}
        if "".join(enc(probe, 0)) != json.dumps(probe, separators=(",", ":")):
            return None
    except Exception:  # noqa: BLE001 - another Python's C encoder: use json.dumps
        return None
    return lambda obj: "".join(enc(obj, 0))


_ENCODE = _compact_encoder()


def _dumps(obj: Any) -> bytes:
    if _ENCODE is not None:
        return _ENCODE(obj).encode()
    return json.dumps(obj, separators=(",", ":"), default=_as_index).encode()


def _ids(ids: list[int]) -> bytes:
    """`1,2,3` for [1, 2, 3]: the inside of the JSON array. Ids of other integer types (numpy's,
    torch's) become their value; anything else (a str, a float, a bool) is a TypeError, never a
    body SGLang would refuse."""
    if not set(map(type, ids)) <= _INT:
        ids = [_as_index(i) for i in ids]
    if orjson is not None:
        return orjson.dumps(ids)[1:-1]
    return _dumps(ids)[1:-1]


@functools.lru_cache(maxsize=256)
def _rest_head(sampling: SamplingParams, routes_start: int | None, lora_name: str | None) -> bytes:
    head = _dumps(generate_rest(sampling, "", routes_start, lora_name))
    assert head.endswith(b',"rid":""}'), head  # the rid is generate_rest's last field
    return b"]," + head[1:-3]


def rest_tail(
    sampling: SamplingParams, rid: str, routes_start: int | None, lora_name: str | None
) -> bytes:
    """What follows the ids in a /generate body: `],` then generate_rest(...)'s JSON without its
    opening brace. Encoded once per (sampling, routes_start, lora_name); the rid is spliced in
    (the engine's are hex: nothing to escape; any other goes through the JSON encoder)."""
    quoted = b'"%s"' % rid.encode() if rid.isascii() and rid.isalnum() else _dumps(rid)
    return b"%s%s}" % (_rest_head(sampling, routes_start, lora_name), quoted)


class _Entry:
    __slots__ = ("source", "ids", "n", "encoded", "size")

    def __init__(self) -> None:
        self.source: TokenHistory | None = None  # the growing list last encoded, trusted
        self.ids: list[int] | None = []  # else a copy of the plain list last encoded
        self.n = 0  # ids encoded
        # `{"input_ids":[` and the `n` ids, then the last request's tail (its first `size` bytes
        # are the prefix): the last body, whole, so it is sent as a view with no copy
        self.encoded = bytearray(_HEAD)
        self.size = len(_HEAD)

    def reusable(self, input_ids: list[int]) -> bool:
        """Whether `input_ids` starts with exactly the `n` ids encoded."""
        if len(input_ids) < self.n:
            return False
        if self.source is not None:
            return input_ids is self.source  # it only grows: its first n ids stand
        return self.ids is not None and input_ids[: self.n] == self.ids


def _grown(buf: bytearray, keep: int, parts: list[bytes]) -> bytearray:
    """`buf[:keep]` followed by `parts`: `buf` itself, unless a view of it still lives (a
    request in flight, a transport that buffered it, a traceback): then a new buffer, and the
    bytes that view shows stay as they were. A body in flight is never changed under it."""
    try:
        del buf[keep:]
        for part in parts:
            buf += part
        return buf
    except BufferError:  # exported: bytearray refuses to resize, nothing was changed
        new = buf[:keep]  # a copy
        for part in parts:
            new += part
        return new


class EncodedPrefixes:
    """Per-key cache of the encoded `input_ids` of the last request; LRU-bounded.

    `encoded_ids` counts ids serialised over the cache's life (the test's measure of work)."""

    def __init__(self, max_entries: int = 16384) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._max = max_entries
        self.encoded_ids = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _encoded(self, key: str, input_ids: list[int], tail: bytes) -> bytearray:
        """`{"input_ids":[...` for `input_ids`, then `tail`, reusing `key`'s prefix: the
        cache's own buffer, changed in place by the next call for `key` unless a view of it
        lives then."""
        entry = self._entries.pop(key, None)
        if entry is None or not entry.reusable(input_ids):
            entry = _Entry()
        n = entry.n
        new = input_ids[n:]  # only the ids appended since the last request
        parts = [b",", _ids(new)] if new and n else [_ids(new)] if new else []
        self.encoded_ids += len(new)
        entry.encoded = _grown(entry.encoded, entry.size, [*parts, tail])
        entry.size = len(entry.encoded) - len(tail)
        if isinstance(input_ids, TokenHistory):
            entry.source, entry.ids = input_ids, None
        else:
            assert entry.ids is not None  # an entry of a TokenHistory is reused by it alone
            entry.ids.extend(new)
        entry.n = len(input_ids)
        self._entries[key] = entry
        if len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return entry.encoded

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)

    def body(self, key: str, input_ids: list[int], rest: dict[str, Any]) -> bytes:
        """The whole body: `{"input_ids": input_ids, **rest}` as compact JSON bytes."""
        if "input_ids" in rest:
            raise ValueError("rest must not hold input_ids: they come from the cache")
        tail = _dumps(rest)  # b"{...}" or b"{}"
        return self.body_with_tail(key, input_ids, b"],%s" % tail[1:] if rest else b"]}")

    def body_with_tail(self, key: str, input_ids: list[int], tail: bytes) -> bytes:
        """The whole body from `tail`, the encoded rest (`rest_tail`), as bytes (a copy)."""
        return bytes(self._encoded(key, input_ids, tail))

    def view_with_tail(self, key: str, input_ids: list[int], tail: bytes) -> memoryview:
        """The same body as a read-only view of the cache's buffer, no copy: a 64k-token
        history's body is ~400 KB, and copying it every turn was a third of what a long
        history added to a turn. The view's bytes never change: while it lives, the next
        request for `key` builds a new buffer (`_grown`); drop it (or `release()`) when the
        request is done so the buffer is reused."""
        return memoryview(self._encoded(key, input_ids, tail)).toreadonly()
