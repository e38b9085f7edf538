"""Credentials reload (:class:`gannet.node.protocol.credentials.Reloader`): an edited file or a
rotated Secret directory applies without a restart; a broken new file keeps the old accounts
and logs an error naming the file and field; checks happen at most every ``interval_s``."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.protocol import auth, credentials
from gannet.node.protocol.gen import admin_pb2, admin_pb2_grpc
from gannet.node.store.config import FlushMode, StoreConfig

from .conftest import ADMIN, Signed

pytestmark = pytest.mark.timeout(60)
NEW = ("rotated", "rotated-secret")


def _document(*keys: tuple[str, str]) -> str:
    allow = [{"actions": ["pub", "sub", "admin"], "topics": ["*"], "groups": ["*"]}]
    return json.dumps(
        {"accounts": [{"access_key": k, "secret_key": s, "allow": allow} for k, s in keys]}
    )


def _replace(path: Path, text: str) -> None:
    """Write beside and rename over, as editors and config tools do (a new inode)."""
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(text)
    os.replace(temp, path)


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def test_a_changed_file_is_reloaded_after_the_interval(tmp_path: Path) -> None:
    path = tmp_path / "accounts.json"
    path.write_text(_document(ADMIN))
    clock = Clock()
    reloader = credentials.Reloader(path, interval_s=2.0, clock=clock)
    assert set(reloader.accounts) == {ADMIN[0]}
    _replace(path, _document(ADMIN, NEW))
    clock.now_s += 1.0
    assert not reloader.poll()  # not checked within the interval
    assert set(reloader.accounts) == {ADMIN[0]}
    clock.now_s += 1.5
    assert reloader.poll()
    assert set(reloader.accounts) == {ADMIN[0], NEW[0]}
    assert reloader.reloads_total == 1
    clock.now_s += 5
    assert not reloader.poll()  # unchanged: nothing read
    assert reloader.reloads_total == 1


def test_a_broken_file_keeps_the_old_accounts_and_logs_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "accounts.json"
    path.write_text(_document(ADMIN))
    clock = Clock()
    reloader = credentials.Reloader(path, interval_s=0.0, clock=clock)
    before = reloader.accounts
    broken = json.dumps({"accounts": [{"access_key": "x", "secret_key": ""}]})
    with caplog.at_level(logging.ERROR, logger=credentials.__name__):
        _replace(path, broken)
        assert not reloader.poll()
        assert not reloader.poll()  # the same broken file is not re-read and re-logged
    assert reloader.accounts is before
    assert reloader.failures_total == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "accounts[0].secret_key: expected a non-empty string" in errors[0]
    assert "keeping the 1 access keys loaded before" in errors[0]
    assert reloader.last_error is not None
    _replace(path, "{not json")
    assert not reloader.poll()
    assert "not valid JSON" in (reloader.last_error or "")
    _replace(path, _document(NEW))
    assert reloader.poll()
    assert set(reloader.accounts) == {NEW[0]}
    assert reloader.last_error is None


def test_a_rotated_secret_directory_is_reloaded(tmp_path: Path) -> None:
    """The kubelet's layout: files are symlinks through ``..data``, which it swaps at once."""
    mount = tmp_path / "secret"
    mount.mkdir()

    def publish(version: str, text: str) -> None:
        directory = mount / f"..{version}"
        directory.mkdir()
        (directory / "accounts.json").write_text(text)
        link = mount / "..data_tmp"
        link.symlink_to(directory.name)
        os.replace(link, mount / "..data")

    publish("v1", _document(ADMIN))
    (mount / "accounts.json").symlink_to("..data/accounts.json")
    reloader = credentials.Reloader(mount, interval_s=0.0)
    assert set(reloader.accounts) == {ADMIN[0]}
    publish("v2", _document(NEW))
    assert reloader.poll()
    assert set(reloader.accounts) == {NEW[0]}


@pytest.fixture
def reloading(tmp_path: Path) -> Iterator[tuple[threads.BrokerThread, Path]]:
    path = tmp_path / "accounts.json"
    path.write_text(_document(ADMIN))
    store = StoreConfig.for_tests(tmp_path / "store", flush_mode=FlushMode.SYNC_FLUSH)
    config = BrokerConfig(store=store, listen_port=0, auth_file=path, auth_reload_interval_s=0.0)
    running = threads.start(config)
    yield running, path
    running.stop()


def _list_topics(endpoint: str, key: tuple[str, str]) -> grpc.StatusCode:
    with grpc.insecure_channel(endpoint) as raw:
        admin = admin_pb2_grpc.AdminStub(grpc.intercept_channel(raw, Signed(*key)))  # type: ignore[no-untyped-call]
        try:
            admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_a_running_broker_applies_new_credentials(
    reloading: tuple[threads.BrokerThread, Path],
) -> None:
    running, path = reloading
    endpoint = running.endpoint
    assert _list_topics(endpoint, NEW) == grpc.StatusCode.UNAUTHENTICATED
    _replace(path, _document(ADMIN, NEW))
    assert _list_topics(endpoint, NEW) == grpc.StatusCode.OK
    _replace(path, '{"accounts": [{"access_key": "only-half"}]}')
    assert _list_topics(endpoint, NEW) == grpc.StatusCode.OK  # old accounts kept
    _replace(path, _document(NEW))  # the admin key revoked
    assert _list_topics(endpoint, ADMIN) == grpc.StatusCode.UNAUTHENTICATED
    assert _list_topics(endpoint, NEW) == grpc.StatusCode.OK
    authenticator = running.broker.authenticator
    assert authenticator is not None
    assert authenticator.reloader is not None
    assert authenticator.reloader.reloads_total == 2
    assert authenticator.reloader.failures_total == 1
    families = {f.name: f for f in auth.DenialsCollector(authenticator).collect()}
    reloads = {
        s.labels["result"]: s.value for s in families["gannet_auth_credentials_reloads"].samples
    }
    assert reloads == {"ok": 2, "failed": 1}
