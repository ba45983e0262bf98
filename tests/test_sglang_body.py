"""The incrementally encoded /generate body is exactly the JSON of the whole body, and a turn's
encoding work does not grow with the history (ids encoded are counted, not wall time)."""

import json

import pytest

from gspo_agents.rollout.engine import SamplingParams, TokenHistory
from gspo_agents.rollout.sglang_body import EncodedPrefixes
from gspo_agents.rollout.sglang_wire import generate_body, generate_rest


def _sampling() -> SamplingParams:
    return SamplingParams(
        max_new_tokens=8, temperature=1.0, top_p=1.0, top_k=0, stop_token_ids=(2,)
    )


def _full(ids, routes=None, lora=None) -> bytes:
    body = generate_body(ids, _sampling(), "r", routes, lora)
    return json.dumps(body, separators=(",", ":")).encode()


def test_body_is_byte_for_byte_the_json_of_the_full_body_turn_after_turn():
    cache, ids = EncodedPrefixes(), []
    for turn in range(5):
        ids = ids + list(range(turn * 7, turn * 7 + 7))
        rest = generate_rest(
            _sampling(), "r", 3 if turn % 2 else None, "lora-a" if turn == 4 else None
        )
        got = cache.body("ep", ids, rest)
        assert got == _full(ids, 3 if turn % 2 else None, "lora-a" if turn == 4 else None)
        assert json.loads(got)["input_ids"] == ids
    assert cache.body("empty", [], generate_rest(_sampling(), "r")) == _full([])


def test_a_changed_history_is_re_encoded_never_served_from_the_stale_prefix():
    cache = EncodedPrefixes()
    cache.body("ep", [1, 2, 3], generate_rest(_sampling(), "r"))
    rewritten = [1, 9, 3, 4]  # same length and last-but-one id, a different middle
    assert cache.body("ep", rewritten, generate_rest(_sampling(), "r")) == _full(rewritten)
    shorter = [1, 9]
    assert cache.body("ep", shorter, generate_rest(_sampling(), "r")) == _full(shorter)


def test_turn_encoding_work_is_the_new_ids_only_whatever_the_history():
    cache = EncodedPrefixes()
    for history in (1_000, 64_000):
        ids = list(range(history))
        cache.body(f"h{history}", ids, {})
        before = cache.encoded_ids
        ids.extend([5, 6, 7])
        cache.body(f"h{history}", ids, {})
        assert cache.encoded_ids - before == 3


def test_the_cache_is_bounded():
    cache = EncodedPrefixes(max_entries=2)
    for key in "abc":
        cache.body(key, [1], {})
    assert len(cache) == 2


def test_a_growing_token_history_is_trusted_without_comparing_it():
    """The manager's ids (a TokenHistory) reuse the prefix by identity: the same bytes, only
    the new ids encoded, and a history that cannot be edited behind the cache's back."""
    cache, history = EncodedPrefixes(), TokenHistory(range(50_000))
    cache.body("ep", history, generate_rest(_sampling(), "r"))
    for turn in range(3):
        history.extend(range(turn, turn + 5))
        assert cache.body("ep", history, generate_rest(_sampling(), "r")) == _full(list(history))
    assert cache.encoded_ids == 50_000 + 15
    other = TokenHistory(history)  # equal ids in another object: not trusted, re-encoded
    assert cache.body("ep", other, generate_rest(_sampling(), "r")) == _full(list(history))
    assert cache.encoded_ids == 2 * 50_000 + 30
    with pytest.raises(TypeError, match="only grows"):
        history[0] = 7
    with pytest.raises(TypeError, match="only grows"):
        del history[-1]
    plain = list(history) + [1]  # a plain list after a TokenHistory: compared, then extended
    assert cache.body("ep", plain, generate_rest(_sampling(), "r")) == _full(plain)


def test_integer_ids_of_other_types_encode_as_their_value_and_others_are_refused():
    """numpy and torch integers (an env or a caller may hand them over) give the bytes of the
    same Python ints; an id that is not an integer is a TypeError naming it, never a body."""
    import numpy as np
    import torch

    rest = generate_rest(SamplingParams(max_new_tokens=4), "r" * 32)
    plain = EncodedPrefixes().body("k", [1, 22, 333], rest)
    assert EncodedPrefixes().body("k", [np.int64(1), np.int32(22), 333], rest) == plain
    assert EncodedPrefixes().body("k", [torch.tensor(1), 22, torch.tensor(333)], rest) == plain
    with pytest.raises(TypeError, match="token id must be an integer.*object"):
        EncodedPrefixes().body("k", [1, object()], rest)


@pytest.mark.parametrize("encoder", ["orjson", "json"])
def test_the_engines_cached_rest_gives_the_same_bytes_with_or_without_orjson(monkeypatch, encoder):
    """SGLangEngine's bodies: the ids by orjson (json where it is missing), the rest encoded
    once per sampling params with the rid spliced in; byte for byte the JSON of the body."""
    import gspo_agents.rollout.sglang_body as sglang_body
    from gspo_agents.rollout.sglang_body import rest_tail

    if encoder == "json":
        monkeypatch.setattr(sglang_body, "orjson", None)
    cache, ids = EncodedPrefixes(), TokenHistory()
    for turn, (routes, lora) in enumerate([(None, None), (3, None), (None, "lora-a"), (5, "b")]):
        ids.extend(range(turn * 1000, turn * 1000 + 9))
        for rid in ("r", "0123456789abcdef" * 2, 'a "quoted"\\rid', "r\u00e9"):
            got = cache.body_with_tail("ep", ids, rest_tail(_sampling(), rid, routes, lora))
            want = generate_body(list(ids), _sampling(), rid, routes, lora)
            assert got == json.dumps(want, separators=(",", ":")).encode()
    other = SamplingParams(max_new_tokens=3, temperature=0.7, top_k=20, seed=5)
    got = EncodedPrefixes().body_with_tail("k", [1, 2], rest_tail(other, "x", None, None))
    assert json.loads(got) == generate_body([1, 2], other, "x")
    with pytest.raises(TypeError, match="token id must be an integer"):
        EncodedPrefixes().body_with_tail("k", [1, "2"], rest_tail(other, "x", None, None))
    with pytest.raises(TypeError, match="token id must be an integer, got bool"):
        EncodedPrefixes().body_with_tail("k", [1, True], rest_tail(other, "x", None, None))


def test_the_engines_view_is_the_body_and_never_changes_while_it_lives():
    """SGLangEngine sends a view of the cached body, no copy. A view still alive when the
    next request of its key is built (a request in flight, a transport that buffered it)
    keeps its bytes: that request gets a new buffer. Once views are dropped the buffer is
    grown in place, so a turn copies nothing of the history."""
    from gspo_agents.rollout.sglang_body import rest_tail

    cache, history = EncodedPrefixes(), TokenHistory(range(1000, 1100))
    tail = rest_tail(_sampling(), "a", None, None)
    first = cache.view_with_tail("ep", history, tail)
    assert first.readonly and bytes(first) == cache.body_with_tail("ep", history, tail)
    assert bytes(first) == _full(list(history)).replace(b'"rid":"r"', b'"rid":"a"')
    held, held_bytes = first, bytes(first)
    history.extend([7, 8])
    second = cache.view_with_tail("ep", history, rest_tail(_sampling(), "b", None, None))
    assert bytes(held) == held_bytes  # the live view was not touched
    assert json.loads(bytes(second))["input_ids"] == list(history)
    assert json.loads(bytes(second))["rid"] == "b"
    assert cache.encoded_ids == 102  # the new buffer copied the prefix, encoded only 2 ids
    held.release()
    buffer = second.obj
    second.release()
    history.extend([9])
    third = cache.view_with_tail("ep", history, tail)
    assert third.obj is buffer  # no view alive: grown in place, the history not copied
    assert json.loads(bytes(third))["input_ids"] == list(history)
