"""The pure parts of ``remoting.acl``: the signature the ACL 1.0 client computes and what each
request code needs (the official client's run is in ``test_remoting_security``)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

from gannet.node.protocol.grants import Action, Kind, Need
from gannet.node.remoting import acl, codes
from gannet.node.remoting.codec import Command


def test_the_signature_covers_every_other_field_in_name_order_then_the_body() -> None:
    ext = {"b": "T", "AccessKey": "ak", "a": "G", acl.SIGNATURE: "ignored"}
    digest = hmac.new(b"sk", b"akGT" + b"body", hashlib.sha1).digest()  # A < a < b
    assert acl.signature("sk", ext, b"body") == base64.b64encode(digest).decode()


def test_each_request_needs_what_its_v2_counterpart_needs() -> None:
    def needs(code: int, ext: dict[str, str], body: bytes = b"") -> list[Need]:
        return acl.needs(Command(code, ext=ext, body=body))

    assert needs(codes.SEND_MESSAGE_V2, {"b": "T"}) == [Need(Action.PUB, Kind.TOPIC, "T")]
    assert needs(codes.SEND_MESSAGE, {"topic": "T"}) == [Need(Action.PUB, Kind.TOPIC, "T")]
    assert needs(codes.PULL_MESSAGE, {"topic": "T", "consumerGroup": "G"}) == [
        Need(Action.SUB, Kind.TOPIC, "T"),
        Need(Action.SUB, Kind.GROUP, "G"),
    ]
    assert needs(codes.GET_MAX_OFFSET, {"topic": "T"}) == [Need(Action.SUB, Kind.TOPIC, "T")]
    lock_body = json.dumps({"consumerGroup": "G", "mqSet": []}).encode()
    assert needs(codes.LOCK_BATCH_MQ, {}, lock_body) == [Need(None, Kind.GROUP, "G")]
    assert needs(codes.QUERY_MESSAGE, {"topic": "T"}) == [Need(Action.ADMIN, Kind.TOPIC, "T")]
    assert needs(codes.HEART_BEAT, {}) == []
    # closed until classified: a code this module does not know needs admin on the broker
    assert needs(9999, {}) == [Need(Action.ADMIN, Kind.CLUSTER, "")]
