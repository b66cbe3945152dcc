# SPDX-License-Identifier: Apache-2.0
"""Error kinds -> exception classes: the mapping itself, every kind the server produces
today through a real ``serve``, and the requests the client refuses before sending."""

from __future__ import annotations

import asyncio
import pickle

import pytest
from conftest import run

import agentstate_client as ac
from agentstate_client import AsyncClient

APP, USER = "app", "u"

KINDS = {
    "already_exists": ac.AlreadyExistsError,
    "not_found": ac.NotFoundError,
    "invalid_argument": ac.InvalidArgumentError,
    "version_conflict": ac.VersionConflictError,
    "too_large": ac.TooLargeError,
    "storage_full": ac.StorageFullError,
    "io_error": ac.IoError,
    "unavailable": ac.UnavailableError,
    "internal": ac.InternalError,
    "data_corrupt": ac.DataCorruptError,
    "unauthenticated": ac.UnauthenticatedError,
    "permission_denied": ac.PermissionDeniedError,
    "condition_failed": ac.ConditionFailedError,
    "cursor_expired": ac.CursorExpiredError,
    "moved": ac.MovedError,
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_has_its_class(kind):
    assert KINDS[kind].kind == kind  # the class keyword: class NotFoundError(..., kind="not_found")
    e = ac.error_from_response({"code": -32000, "message": "m", "data": {"kind": kind}})
    assert type(e) is KINDS[kind]
    assert isinstance(e, ac.AgentStateError)
    assert (e.kind, e.code, e.message, e.data) == (kind, -32000, "m", {"kind": kind})
    assert e.retryable == (kind in ("io_error", "unavailable", "moved"))
    copy = pickle.loads(pickle.dumps(e))
    assert type(copy) is type(e) and copy.data == e.data


def test_package_exports_every_error():
    import agentstate_client.errors as errors
    assert set(errors.__all__) <= set(ac.__all__)
    assert all(getattr(ac, name) is getattr(errors, name) for name in errors.__all__)
    client_side = {ac.AgentStateError, ac.ConnectionClosedError, ac.WatchOverflowError,
                   ac.SpawnError}
    assert set(KINDS.values()) | client_side == {
        v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, ac.AgentStateError)}


def test_a_subclass_without_a_kind_keeps_its_bases():
    assert ac.ConnectionClosedError.kind == ac.UnavailableError.kind == "unavailable"
    assert ac.ConnectionClosedError("gone").kind == "unavailable"
    assert ac.WatchOverflowError.kind == "watch_overflow"


def test_unknown_and_malformed_errors():
    e = ac.error_from_response({"code": -32000, "message": "m", "data": {"kind": "brand_new"}})
    assert type(e) is ac.AgentStateError and e.kind == "brand_new"
    proto = ac.error_from_response({"code": -32601, "message": "unknown method 'x'",
                                    "data": {"kind": "invalid_argument"}})
    assert type(proto) is ac.InvalidArgumentError and proto.code == ac.METHOD_NOT_FOUND
    for bad in ("text", {"message": "no code"}, {"code": "1", "message": "m"}, {"code": 1}):
        assert type(ac.error_from_response(bad)) is ac.InternalError
    vc = ac.error_from_response({"code": -32000, "message": "m",
                                 "data": {"kind": "version_conflict", "current_version": 7}})
    assert vc.current_version == 7
    ce = ac.error_from_response({"code": -32000, "message": "m",
                                 "data": {"kind": "cursor_expired", "oldest": "ab-9"}})
    assert type(ce) is ac.CursorExpiredError and ce.oldest == "ab-9"
    ended = ac.error_from_watch_end({"kind": "cursor_expired", "message": "m", "oldest": "ab-9"})
    assert type(ended) is ac.CursorExpiredError and ended.oldest == "ab-9"
    assert ended.code == ac.ENGINE_ERROR
    for bad in (None, "text", {"message": "no kind"}):
        assert type(ac.error_from_watch_end(bad)) is ac.InternalError


def test_server_error_kinds(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            await c.create_session(APP, USER, "s")

            with pytest.raises(ac.AlreadyExistsError) as e:
                await c.create_session(APP, USER, "s")
            assert e.value.code == ac.ENGINE_ERROR and "'s'" in e.value.message

            with pytest.raises(ac.NotFoundError):
                await c.append_event(APP, USER, "missing", {"author": "a"})
            with pytest.raises(ac.NotFoundError) as e:
                await c.inject_state(APP, USER, "s", "{nope}")
            assert "nope" in e.value.message

            await c.append_event(APP, USER, "s", {"author": "a"})
            with pytest.raises(ac.VersionConflictError) as e:
                await c.append_event(APP, USER, "s", {"author": "a"}, expected_version=0)
            assert e.value.current_version == 1 and e.value.code == ac.ENGINE_ERROR

            for call in (lambda: c.create_session("", USER),
                         lambda: c.list_sessions(APP, page_size=0),
                         lambda: c.list_sessions(APP, page_token="not-a-token"),
                         lambda: c.get_session(APP, USER, "s", num_recent_events=-1)):
                with pytest.raises(ac.InvalidArgumentError) as e:
                    await call()
                assert e.value.code == ac.ENGINE_ERROR

            with pytest.raises(ac.TooLargeError) as e:
                await c.create_session("a" * 101, USER)
            assert e.value.code == ac.ENGINE_ERROR
            with pytest.raises(ac.TooLargeError):
                await c.append_event(APP, USER, "s", {"author": "a", "actions": {
                    "state_delta": {"big": "x" * (1 << 20)}}})

            # Protocol-level errors carry their JSON-RPC code and kind invalid_argument.
            with pytest.raises(ac.InvalidArgumentError) as e:
                await c.call("no_such_method")
            assert e.value.code == ac.METHOD_NOT_FOUND and "no_such_method" in e.value.message
            with pytest.raises(ac.InvalidArgumentError) as e:
                await c.create_session(APP, 7)
            assert e.value.code == ac.INVALID_PARAMS and "user_id" in e.value.message
            with pytest.raises(ac.InvalidArgumentError) as e:
                await c.call("get_session", {"app_name": APP})
            assert e.value.code == ac.INVALID_PARAMS

            # Nothing above changed the session; the connection is still usable.
            got = await c.get_session(APP, USER, "s")
            assert got["version"] == 1
    run(body())


def nest(depth: int):
    v = 1
    for _ in range(depth):
        v = [v]
    return v


def test_requests_refused_before_sending(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            await c.create_session(APP, USER, "s")
            appends_before = (await c.stats())["appends"]

            def delta(value):
                return {"author": "a", "actions": {"state_delta": {"k": value}}}

            # Request, params, event, actions, state_delta: 5 levels; the server parses 72.
            # Up to 67 levels of value reach the engine, which allows 64.
            assert (await c.append_event(APP, USER, "s", delta(nest(64))))["version"] == 1
            with pytest.raises(ac.TooLargeError) as e:
                await c.append_event(APP, USER, "s", delta(nest(67)))
            assert e.value.code == ac.ENGINE_ERROR
            with pytest.raises(ac.TooLargeError) as e:
                await c.append_event(APP, USER, "s", delta(nest(68)))
            assert e.value.code is None
            with pytest.raises(ac.TooLargeError) as e:
                await c.append_event(APP, USER, "s", delta(nest(5000)))
            assert e.value.code is None
            # The same boundary through params of a method that ignores them.
            await c.call("stats", {"pad": nest(70)})
            with pytest.raises(ac.TooLargeError):
                await c.call("stats", {"pad": nest(71)})

            circular: list = []
            circular.append(circular)
            for bad in (float("nan"), float("inf"), object(), "\ud800", circular, {("t",): 1}):
                with pytest.raises(ac.InvalidArgumentError) as e:
                    await c.append_event(APP, USER, "s", delta(bad))
                assert e.value.code is None

            with pytest.raises(TypeError):
                await c.call(7)
            with pytest.raises(TypeError):
                await c.call("stats", ["positional"])

            assert (await c.stats())["appends"] == appends_before + 1
            assert (await c.get_session(APP, USER, "s"))["version"] == 1
    run(body())


def test_line_limit_checked_locally(agentstate_bin, store):
    async def body():
        limit = 4096
        async with await AsyncClient.spawn(store, binary=agentstate_bin, max_line_bytes=limit) as c:
            # {"jsonrpc":"2.0","id":N,"method":"stats","params":{"pad":"..."}}
            overhead = len('{"jsonrpc":"2.0","id":2,"method":"stats","params":{"pad":""}}')
            await c.call("stats", {"pad": "x" * (limit - overhead)})  # id 2: exactly the limit
            with pytest.raises(ac.TooLargeError) as e:
                await c.call("stats", {"pad": "x" * (limit - overhead + 1)})
            assert e.value.code is None and str(limit) in e.value.message
            assert "appends" in await c.stats()
    run(body())


def test_unmatched_server_error_closes_the_connection(tcp_server_factory):
    """A server with a lower line limit than the client assumes answers the long line with
    id null. No caller can be given that answer, so the connection is closed and every
    pending request fails with ConnectionClosedError (the server's error as its cause)."""
    server = tcp_server_factory("--max-line-bytes", "1024")

    async def body():
        c = await AsyncClient.connect(server.address)
        await c.create_session(APP, USER, "s")
        slow = [asyncio.ensure_future(c.append_event(APP, USER, "s", {"author": "a"}))
                for _ in range(20)]
        with pytest.raises(ac.ConnectionClosedError) as e:
            await c.call("stats", {"pad": "x" * 2000})
        assert isinstance(e.value, ac.UnavailableError) and e.value.retryable
        assert isinstance(e.value.__cause__, ac.TooLargeError)
        assert e.value.__cause__.code == ac.PARSE_ERROR
        # Requests written before it were answered or failed the same way; none hangs.
        for outcome in await asyncio.gather(*slow, return_exceptions=True):
            assert isinstance(outcome, (dict, ac.ConnectionClosedError))
        with pytest.raises(ac.ConnectionClosedError):
            await c.stats()
        await c.close()

        fresh = await AsyncClient.connect(server.address)
        assert (await fresh.get_session(APP, USER, "s"))["id"] == "s"
        await fresh.close()
    run(body())
