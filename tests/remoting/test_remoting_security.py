"""ACL signatures and TLS on the remoting port: a broker with ``--auth-file`` and
``--tls-cert`` serves the official 4.9.8 client signing with rocketmq-acl's
``AclClientRPCHook`` over TLS (one JVM: sends, a pull consumer, and the refusals it gets), and
raw frames signed in Python get the refusals each fault earns (``remoting.acl``)."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from gannet.node.broker import threads
from gannet.node.broker.serving import BrokerConfig
from gannet.node.remoting import acl, codes, messages
from gannet.node.remoting.codec import Command
from gannet.node.store.config import FlushMode, StoreConfig
from tests.security import certs

from . import java_clients
from .client import RawClient

pytestmark = pytest.mark.timeout(300)

TOPIC = "RemSecT"
DENIED = "RemSecDenied"
GROUP = "GRemSec"
APP = ("app", "app-secret")
ACCOUNTS = {
    "accounts": [
        {
            "access_key": APP[0],
            "secret_key": APP[1],
            "allow": [
                {"actions": ["pub", "sub"], "topics": [TOPIC], "groups": ["GRemSec*"]},
                {"actions": ["sub"], "topics": [DENIED], "groups": ["GRemSec*"]},
            ],
        },
    ]
}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[certs.Authority, certs.Issued]:
    directory = tmp_path_factory.mktemp("remoting-pki")
    ca = certs.authority(directory, "remoting-ca")
    return ca, ca.issue(directory, "broker", server=True)


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory, pki: tuple[certs.Authority, certs.Issued]
) -> Iterator[threads.BrokerThread]:
    root = tmp_path_factory.mktemp("remoting-secured")
    (root / "accounts.json").write_text(json.dumps(ACCOUNTS))
    _, server = pki
    config = BrokerConfig(
        store=StoreConfig.for_tests(root / "store", flush_mode=FlushMode.SYNC_FLUSH),
        listen_port=0,
        remoting_port=0,
        nameserver_port=0,
        auto_create_topics=True,
        auto_create_groups=True,
        auth_file=root / "accounts.json",
        tls_cert=server.cert_file,
        tls_key=server.key_file,
    )
    running = threads.start(config)
    yield running
    running.stop()


def _client_tls(ca: certs.Authority) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca.cert_file))


def _signed(ext: dict[str, str], body: bytes, key: tuple[str, str]) -> dict[str, str]:
    fields = {**ext, acl.ACCESS_KEY: key[0]}
    return {**fields, acl.SIGNATURE: acl.signature(key[1], fields, body)}


def _send_ext(topic: str) -> dict[str, str]:
    properties = messages.format_properties({"UNIQ_KEY": messages.new_message_id()})
    return {"b": topic, "e": "0", "f": "0", "g": "0", "i": properties}


def test_the_official_acl_client_signs_over_tls_and_is_refused_what_it_may_not_do(
    secured: threads.BrokerThread, pki: tuple[certs.Authority, certs.Issued], tmp_path: Path
) -> None:
    ca, _ = pki
    properties = (
        "-Dtls.enable=true",  # TlsSystemConfig: every channel, name server included, is TLS
        "-Dtls.test.mode.enable=false",  # verify the broker's certificate ...
        f"-Dtls.client.trustCertPath={ca.cert_file}",  # ... against the test CA
    )
    namesrv = secured.broker.nameserver_endpoint
    args = ("secure", namesrv, TOPIC, DENIED, GROUP, *APP, "3")
    lines = java_clients.run(tmp_path, *args, properties=properties)
    sent = [line.split()[1] for line in lines if line.startswith("sent ")]
    assert sent == ["sec0", "sec1", "sec2"], lines
    refused = {line.split()[1]: line.split(maxsplit=3)[2:] for line in lines if "refused" in line}
    assert set(refused) == {"denied", "wrongsecret", "unknownkey"}, lines
    assert refused["denied"][0] == str(codes.NO_PERMISSION), refused
    assert f"may not pub topic '{DENIED}'" in refused["denied"][1]
    assert refused["wrongsecret"][0] == str(codes.NO_PERMISSION), refused
    assert "signature does not match" in refused["wrongsecret"][1]
    assert refused["unknownkey"][0] == str(codes.NO_PERMISSION), refused
    assert "unknown access key 'nobody'" in refused["unknownkey"][1]
    got = {line.split()[1] for line in lines if line.startswith("got ")}
    assert got == {"sec0", "sec1", "sec2"}, lines
    assert lines[-1] == "done"


def test_raw_frames_are_checked_signature_first_then_rights(
    secured: threads.BrokerThread, pki: tuple[certs.Authority, certs.Issued]
) -> None:
    ca, _ = pki
    endpoint = f"127.0.0.1:{secured.broker.remoting_port}"
    body = b"signed in python"
    with RawClient(endpoint, tls=_client_tls(ca)) as client:
        ok = client.call(codes.SEND_MESSAGE_V2, _signed(_send_ext(TOPIC), body, APP), body)
        assert ok.code == codes.SUCCESS, ok.remark

        unsigned = client.call(codes.SEND_MESSAGE_V2, _send_ext(TOPIC), body)
        assert unsigned.code == codes.NO_PERMISSION
        assert "not signed" in str(unsigned.remark)

        tampered = _signed(_send_ext(TOPIC), body, APP)
        changed = client.call(codes.SEND_MESSAGE_V2, tampered, body + b"!")  # body not signed
        assert changed.code == codes.NO_PERMISSION
        assert "signature does not match" in str(changed.remark)

        unknown = client.call(
            codes.SEND_MESSAGE_V2, _signed(_send_ext(TOPIC), body, ("ghost", APP[1])), body
        )
        assert unknown.code == codes.NO_PERMISSION
        assert "unknown access key 'ghost'" in str(unknown.remark)

        pull = {
            "consumerGroup": "OtherGroup", "topic": TOPIC, "queueId": "0", "queueOffset": "0",
            "maxMsgNums": "1", "sysFlag": "0",
        }  # fmt: skip
        denied = client.call(codes.PULL_MESSAGE, _signed(pull, b"", APP))
        assert denied.code == codes.NO_PERMISSION
        assert "may not sub group 'OtherGroup'" in str(denied.remark)

        unclassified = client.call(codes.VIEW_MESSAGE_BY_ID, _signed({"offset": "0"}, b"", APP))
        assert unclassified.code == codes.NO_PERMISSION  # closed until classified: admin only
        assert "may not admin the broker" in str(unclassified.remark)

        route = client.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})  # as RocketMQ 4
        assert route.code == codes.SUCCESS, route.remark
    denials = secured.broker.authenticator.denials_total  # type: ignore[union-attr]
    assert denials["unsigned"] >= 1
    assert denials["bad_signature"] >= 1
    assert denials["unknown_access_key"] >= 1
    assert denials["forbidden"] >= 2


def test_a_tls_remoting_port_refuses_plaintext(secured: threads.BrokerThread) -> None:
    endpoint = f"127.0.0.1:{secured.broker.remoting_port}"
    with RawClient(endpoint, timeout_s=10) as client:
        client.send(Command(codes.GET_BROKER_CLUSTER_INFO))
        assert client.closed_by_peer()  # no answer: the handshake failed
