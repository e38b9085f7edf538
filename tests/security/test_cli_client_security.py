"""The admin CLI against a broker with ``--auth-file`` and TLS: ``--access-key/--secret-key``
(or ``GANNET_ACCESS_KEY/GANNET_SECRET_KEY``) sign every call, ``--tls-ca`` reaches the TLS-only
port, and refusals say which option is missing (exit 5; unreachable 4; usage 2)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.cli import root as cli
from gannet.node.store.config import FlushMode, StoreConfig

from . import certs
from .conftest import ADMIN, PUB_A, SUB_A, TOPIC_A, write_accounts

pytestmark = pytest.mark.timeout(60)


class Secured:
    def __init__(self, root: Path) -> None:
        authority = certs.authority(root, "ca")
        server = authority.issue(root, "broker", server=True)
        self.ca_file = authority.cert_file
        store = StoreConfig.for_tests(root / "store", flush_mode=FlushMode.SYNC_FLUSH)
        config = BrokerConfig(
            store=store,
            listen_port=0,
            auth_file=write_accounts(root / "accounts.json"),
            tls_cert=server.cert_file,
            tls_key=server.key_file,
        )
        self.running = threads.start(config)
        self.endpoint = self.running.endpoint


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    made = Secured(tmp_path_factory.mktemp("cli-secured"))
    yield made
    made.running.stop()


def _run(secured: Secured, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(
        cli.main, [*args, "--endpoint", secured.endpoint], env=env, catch_exceptions=False
    )


def _as(key: tuple[str, str], secured: Secured) -> list[str]:
    return ["--access-key", key[0], "--secret-key", key[1], "--tls-ca", str(secured.ca_file)]


def test_signed_tls_commands_work(secured: Secured) -> None:
    created = _run(secured, "topic", "create", "CliSecure", "--queues", "2", *_as(ADMIN, secured))
    assert created.exit_code == 0, created.output
    listed = _run(secured, "topic", "list", *_as(ADMIN, secured))
    assert listed.exit_code == 0, listed.output
    assert "CliSecure" in listed.output
    status = _run(secured, "status", *_as(ADMIN, secured))
    assert status.exit_code == 0, status.output
    sent = _run(secured, "message", "send", "CliSecure", "hello", *_as(ADMIN, secured))
    assert sent.exit_code == 0, sent.output
    assert "sent to CliSecure" in sent.output


def test_keys_from_the_environment(secured: Secured) -> None:
    env = {
        "GANNET_ACCESS_KEY": ADMIN[0],
        "GANNET_SECRET_KEY": ADMIN[1],
        "GANNET_TLS_CA": str(secured.ca_file),
    }
    listed = _run(secured, "group", "list", env=env)
    assert listed.exit_code == 0, listed.output


def test_unsigned_call_says_which_options_to_pass(secured: Secured) -> None:
    result = _run(secured, "topic", "list", "--tls-ca", str(secured.ca_file))
    assert result.exit_code == 5
    assert "not authenticated" in result.output
    assert "--access-key and --secret-key" in result.output
    assert "GANNET_ACCESS_KEY" in result.output


def test_bad_secret_is_refused(secured: Secured) -> None:
    result = _run(secured, "topic", "list", *_as((ADMIN[0], "wrong"), secured))
    assert result.exit_code == 5
    assert "does not match its secret" in result.output


def test_key_without_admin_right_is_not_allowed(secured: Secured) -> None:
    result = _run(secured, "topic", "create", "Nope", *_as(SUB_A, secured))
    assert result.exit_code == 5
    assert "not allowed" in result.output
    assert "may not admin topic 'Nope'" in result.output


def test_plaintext_to_a_tls_broker_hints_at_tls(secured: Secured) -> None:
    result = _run(secured, "topic", "list", "--access-key", ADMIN[0], "--secret-key", ADMIN[1])
    assert result.exit_code == 4
    assert "needs --tls" in result.output


def test_access_key_without_secret_is_a_usage_error(secured: Secured) -> None:
    result = _run(secured, "topic", "list", "--access-key", ADMIN[0])
    assert result.exit_code == 2
    assert "give both --access-key and --secret-key" in result.output


def test_tls_ca_that_is_not_pem_is_a_usage_error(secured: Secured, tmp_path: Path) -> None:
    bogus = tmp_path / "ca.crt"
    bogus.write_text("not a certificate\n")
    result = _run(secured, "topic", "list", "--tls-ca", str(bogus))
    assert result.exit_code == 2
    assert "is not PEM" in result.output


def test_cluster_status_signs_and_uses_tls(secured: Secured) -> None:
    args = ["cluster", "status", "--endpoints", secured.endpoint]
    plain = CliRunner().invoke(cli.main, args, catch_exceptions=False)
    assert plain.exit_code == 4  # the member could not be asked
    signed = CliRunner().invoke(cli.main, [*args, *_as(ADMIN, secured)], catch_exceptions=False)
    assert "UNAVAILABLE" not in signed.output
    assert "UNAUTHENTICATED" not in signed.output
    assert signed.exit_code == 0, signed.output


def test_send_with_a_publish_only_key_succeeds_without_the_queue_lookup(secured: Secured) -> None:
    made = _run(secured, "topic", "create", TOPIC_A, "--queues", "1", *_as(ADMIN, secured))
    assert made.exit_code in (0, 5), made.output  # 5: an earlier test made it
    sent = _run(secured, "message", "send", TOPIC_A, "hi", "-o", "json", *_as(PUB_A, secured))
    assert sent.exit_code == 0, sent.output  # the admin-only lookup is refused: queue unknown
    rows = json.loads(sent.stdout)
    assert [(row["queue"], row["offset"] >= 0) for row in rows] == [(None, True)]
    as_admin = _run(secured, "message", "send", TOPIC_A, "hi", "-o", "json", *_as(ADMIN, secured))
    assert json.loads(as_admin.stdout)[0]["queue"] == 0
