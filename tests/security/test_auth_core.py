"""The pure authentication and authorization core (:mod:`gannet.node.protocol.auth`)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2
from rocketmq.v5.util.signature import Signature

from gannet.node.protocol import auth
from gannet.node.protocol.auth import Action, Kind, Need
from gannet.node.protocol.gen import admin_pb2

from .conftest import ACCOUNTS, write_accounts

NOW_S = datetime(2026, 11, 22, 6, 30, 0, tzinfo=UTC).timestamp()
STAMP = "20261122T063000Z"


def _authenticator(now_s: float = NOW_S, **kwargs) -> auth.Authenticator:
    accounts = {a.access_key: a for a in auth.parse_accounts(ACCOUNTS, "test")}
    return auth.Authenticator(accounts, clock=lambda: now_s, **kwargs)


def _headers(ak: str, sk: str, stamp: str = STAMP, request_id: str = "r1") -> list[tuple[str, str]]:
    signature = auth.sign(sk, stamp)
    value = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={signature}"
    return [("x-mq-date-time", stamp), ("authorization", value), ("x-mq-request-id", request_id)]


def test_signature_is_the_official_clients():
    assert auth.sign("sk", STAMP) == Signature.sign("sk", STAMP)
    assert auth.sign("", STAMP) == Signature.sign("", STAMP)


def test_good_signature_authenticates_and_names_the_account():
    account = _authenticator().authenticate(_headers("root", "root-secret"))
    assert account.access_key == "root"


@pytest.mark.parametrize(
    ("headers", "reason", "words"),
    [
        ([], "unsigned", "no authorization header"),
        (_headers("", ""), "unsigned", "no access key"),
        (_headers("root", "wrong"), "bad_signature", "does not match"),
        (_headers("nobody", "x"), "unknown_access_key", "'nobody'"),
        ([("authorization", "Basic abc")], "malformed_authorization", "scheme"),
        ([("authorization", "MQv2-HMAC-SHA1 Credential")], "malformed_authorization", "key=value"),
        ([("authorization", "MQv2-HMAC-SHA1 " + "a=b," * 400)], "malformed_authorization", "1024"),
        (_headers("root", "root-secret")[1:], "bad_date_time", "x-mq-date-time"),
        (_headers("root", "root-secret", "20261122T043000Z"), "clock_skew", "7200 s off"),
    ],
)
def test_refusals_name_the_problem_and_are_counted(headers, reason, words):
    authenticator = _authenticator()
    with pytest.raises(auth.Denied) as refused:
        authenticator.authenticate(headers)
    assert refused.value.code == Code.UNAUTHORIZED
    assert refused.value.reason == reason
    assert words in refused.value.message
    assert _counted(authenticator) == {reason: 1}


def test_bad_hex_signature_is_a_bad_signature_not_a_crash():
    value = "MQv2-HMAC-SHA1 Credential=root, SignedHeaders=x-mq-date-time, Signature=zz"
    with pytest.raises(auth.Denied, match="does not match"):
        _authenticator().authenticate([("x-mq-date-time", STAMP), ("authorization", value)])


def test_skew_window_is_inclusive_and_configurable():
    ok = _authenticator(NOW_S + 900)
    ok.authenticate(_headers("root", "root-secret"))
    with pytest.raises(auth.Denied, match="901 s off"):
        _authenticator(NOW_S + 901).authenticate(_headers("root", "root-secret"))
    _authenticator(NOW_S + 3000, skew_s=3600).authenticate(_headers("root", "root-secret"))


def test_same_signature_many_calls_from_one_host_pass_but_not_a_verbatim_resend():
    authenticator = _authenticator()
    for i in range(5):  # one client, one second, five calls: one signature
        authenticator.authenticate(_headers("root", "root-secret", request_id=f"r{i}"))
    with pytest.raises(auth.Denied, match="request replayed"):
        authenticator.authenticate(_headers("root", "root-secret", request_id="r3"))
    assert _counted(authenticator) == {"replayed": 1}


def test_hosts_sharing_a_key_in_one_second_are_all_served():
    """A fleet sharing an access key sends one signature per second from many hosts."""
    clock = [NOW_S]
    accounts = {a.access_key: a for a in auth.parse_accounts(ACCOUNTS, "test")}
    authenticator = auth.Authenticator(accounts, clock=lambda: clock[0], skew_s=60)
    for host in range(5):
        authenticator.authenticate(_headers("root", "root-secret", request_id=f"host{host}"))
    with pytest.raises(auth.Denied, match="request replayed"):
        authenticator.authenticate(_headers("root", "root-secret", request_id="host2"))
    clock[0] += 50  # still inside the window (twice the skew): still a replay
    with pytest.raises(auth.Denied, match="request replayed"):
        authenticator.authenticate(_headers("root", "root-secret", request_id="host2"))
    assert _counted(authenticator) == {"replayed": 2}


def test_replay_entries_expire_after_the_window():
    guard = auth.ReplayGuard(window_s=120)
    assert guard.check("sig", "r1", now_s=0.0) is None
    assert guard.check("sig", "r1", now_s=119.0) is not None
    assert guard.check("other", "r2", now_s=121.0) is None  # drops the first pair
    assert len(guard) == 1


def test_signed_request_without_request_id_is_refused():
    headers = [h for h in _headers("root", "root-secret") if h[0] != "x-mq-request-id"]
    with pytest.raises(auth.Denied, match="needs an x-mq-request-id"):
        _authenticator().authenticate(headers)


def test_replay_tables_are_bounded():
    guard = auth.ReplayGuard(window_s=900, entries_max=10)
    for i in range(1000):
        assert guard.check(f"sig{i}", f"r{i}", now_s=1.0) is None
    assert len(guard) == 10
    assert guard.check("sig999", "r999", now_s=1.0) is not None  # the newest are kept


def test_grants_use_wildcards_per_action_and_kind():
    accounts = {a.access_key: a for a in auth.parse_accounts(ACCOUNTS, "test")}
    sub_a = accounts["sub-a"]
    assert sub_a.allows(Need(Action.SUB, Kind.TOPIC, "TopicA"))
    assert sub_a.allows(Need(Action.SUB, Kind.GROUP, "GroupXYZ"))
    assert sub_a.allows(Need(None, Kind.TOPIC, "TopicA"))
    assert not sub_a.allows(Need(Action.PUB, Kind.TOPIC, "TopicA"))
    assert not sub_a.allows(Need(Action.SUB, Kind.TOPIC, "TopicB"))
    assert not sub_a.allows(Need(Action.ADMIN, Kind.CLUSTER, ""))
    assert accounts["pub-a"].allows(Need(Action.PUB, Kind.TOPIC, "TopicA"))
    assert not accounts["pub-a"].allows(Need(Action.PUB, Kind.TOPIC, "TopicAA"))
    assert accounts["root"].allows(Need(Action.ADMIN, Kind.CLUSTER, ""))


def test_authorize_refuses_with_forbidden_naming_the_right():
    authenticator = _authenticator()
    account = authenticator.accounts["sub-a"]
    with pytest.raises(auth.Denied) as refused:
        authenticator.authorize(account, [Need(Action.PUB, Kind.TOPIC, "TopicA")])
    assert refused.value.code == Code.FORBIDDEN
    assert refused.value.message == "access key 'sub-a' may not pub topic 'TopicA'"
    assert _counted(authenticator) == {"forbidden": 1}


def _resource(name: str) -> definition_pb2.Resource:
    return definition_pb2.Resource(name=name)


def test_needs_per_rpc():
    send = service_pb2.SendMessageRequest(
        messages=[definition_pb2.Message(topic=_resource("T1")) for _ in range(3)]
    )
    assert auth.needs("v2", "SendMessage", send) == [Need(Action.PUB, Kind.TOPIC, "T1")]
    receive = service_pb2.ReceiveMessageRequest(
        group=_resource("G"), message_queue=definition_pb2.MessageQueue(topic=_resource("T"))
    )
    assert auth.needs("v2", "ReceiveMessage", receive) == [
        Need(Action.SUB, Kind.TOPIC, "T"),
        Need(Action.SUB, Kind.GROUP, "G"),
    ]
    ack = service_pb2.AckMessageRequest(group=_resource("G"), topic=_resource("T"))
    assert auth.needs("v2", "AckMessage", ack)[0] == Need(Action.SUB, Kind.TOPIC, "T")
    route = service_pb2.QueryRouteRequest(topic=_resource("T"))
    assert auth.needs("v2", "QueryRoute", route) == [Need(None, Kind.TOPIC, "T")]
    assert auth.needs("v2", "Heartbeat", service_pb2.HeartbeatRequest()) == []
    assert auth.needs("v2", "SomethingNew", object()) == [Need(Action.ADMIN, Kind.CLUSTER, "")]
    settings = service_pb2.TelemetryCommand(
        settings=definition_pb2.Settings(
            subscription=definition_pb2.Subscription(
                group=_resource("G"),
                subscriptions=[definition_pb2.SubscriptionEntry(topic=_resource("T"))],
            )
        )
    )
    assert auth.needs("v2", "Telemetry", settings) == [
        Need(None, Kind.GROUP, "G"),
        Need(None, Kind.TOPIC, "T"),
    ]
    # the data source's bulk read is a read, as v2 PullMessage: no admin right needed
    bulk = admin_pb2.PullRecordsRequest(topic="T")
    assert auth.needs("admin", "PullRecords", bulk) == [Need(Action.SUB, Kind.TOPIC, "T")]
    bulk.group = "G"
    assert auth.needs("admin", "PullRecords", bulk)[1] == Need(Action.SUB, Kind.GROUP, "G")


def test_load_file_yaml_and_secret_directory(tmp_path: Path):
    one = auth.load(write_accounts(tmp_path / "a.json"))
    assert set(one) == {"root", "pub-a", "sub-a"}
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "..data").mkdir()  # what a Secret volume holds besides its keys
    (secret / "team.yaml").write_text(
        "accounts:\n  - access_key: k1\n    secret_key: s1\n"
        "    allow:\n      - actions: [pub]\n        topics: ['*']\n"
    )
    (secret / "more.json").write_text(
        json.dumps({"accounts": [{"access_key": "k2", "secret_key": "s2"}]})
    )
    loaded = auth.load(secret)
    assert set(loaded) == {"k1", "k2"}
    assert loaded["k1"].allows(Need(Action.PUB, Kind.TOPIC, "x"))
    assert "s1" not in repr(loaded["k1"])


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ([], "an 'accounts' list"),
        ({"accounts": [{"access_key": "k"}]}, "accounts[0].secret_key"),
        ({"accounts": [{"access_key": "k", "secret_key": "s", "allow": [{}]}]}, "allow[0].actions"),
        (
            {"accounts": [{"access_key": "k", "secret_key": "s", "allow": [{"actions": ["rw"]}]}]},
            "'rw' is not one of pub, sub, admin",
        ),
        (
            {
                "accounts": [
                    {
                        "access_key": "k",
                        "secret_key": "s",
                        "allow": [{"actions": ["pub"], "topics": "x"}],
                    }
                ]
            },
            "topics: expected a list",
        ),
    ],
)
def test_bad_credentials_files_are_named(tmp_path: Path, document, words):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(auth.CredentialsError, match=r"bad\.json") as error:
        auth.load(path)
    assert words in str(error.value)


def test_missing_and_repeated(tmp_path: Path):
    with pytest.raises(auth.CredentialsError, match="no such credentials file"):
        auth.load(tmp_path / "none.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(auth.CredentialsError, match=r"no \*\.json"):
        auth.load(empty)
    (empty / "a.json").write_text(json.dumps(ACCOUNTS))
    (empty / "b.json").write_text(json.dumps(ACCOUNTS))
    with pytest.raises(auth.CredentialsError, match="'root' is repeated"):
        auth.load(empty)


def _counted(authenticator: auth.Authenticator) -> dict[str, int]:
    """The reasons refused at least once."""
    return {reason: n for reason, n in authenticator.denials_total.items() if n}


def test_every_refusal_reason_is_a_known_label():
    """Each reason the signing check can refuse with is in DENIAL_REASONS (exported at 0)."""
    from gannet.node.protocol import signing

    source = Path(signing.__file__).read_text()
    used = set(re.findall(r'_unauthorized\(\s*"([a-z_]+)"', source))
    used |= set(re.findall(r'Denied\(UNAUTHORIZED, "([a-z_]+)"', source))
    assert used
    assert used <= set(signing.DENIAL_REASONS), used - set(signing.DENIAL_REASONS)


def test_denials_are_exported_at_zero_before_the_first_refusal():
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(auth.DenialsCollector(_authenticator()))
    text = generate_latest(registry).decode()
    for reason in ("bad_signature", "forbidden", "unsigned", "replayed"):
        assert f'gannet_auth_denials_total{{reason="{reason}"}} 0.0' in text


def test_denials_are_exported_as_a_prometheus_counter():
    from prometheus_client import CollectorRegistry, generate_latest

    authenticator = _authenticator()
    with pytest.raises(auth.Denied):
        authenticator.authenticate(_headers("root", "wrong"))
    registry = CollectorRegistry()
    registry.register(auth.DenialsCollector(authenticator))
    text = generate_latest(registry).decode()
    assert 'gannet_auth_denials_total{reason="bad_signature"} 1.0' in text
