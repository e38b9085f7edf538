"""Header fields as the C++ client writes them (rocketmq-client-cpp, through
rocketmq-client-python 0.5.0rc2), pure rules of :mod:`gannet.node.remoting.codec` and
:mod:`gannet.node.remoting.transactions`: booleans as ``1``, and in the answer to a check the
transaction id as ``msgId``."""

from __future__ import annotations

import pytest

from gannet.node.remoting import codec, transactions

TX = "00000000000001FE"


@pytest.mark.parametrize(
    ("written", "from_check"),
    [("true", True), ("1", True), ("TRUE", True), ("false", False), ("0", False), ("", False)],
)
def test_from_transaction_check_is_a_boolean_in_java_and_cpp_spellings(
    written: str, from_check: bool
) -> None:
    assert transactions.from_check({"fromTransactionCheck": written}) is from_check


def test_from_transaction_check_absent_is_a_client_end() -> None:
    assert transactions.from_check({}) is False


def test_a_unique_key_in_msg_id_is_passed_on_for_the_v2_check() -> None:
    unique_key = "0100007F000015910000463C321D0100"
    assert transactions.end_message_id({"msgId": unique_key}, TX) == unique_key


@pytest.mark.parametrize("written", [TX, TX.lower()])
def test_a_msg_id_naming_the_transaction_id_is_no_unique_key(written: str) -> None:
    # the C++ client's answer to CHECK_TRANSACTION_STATE: msgId = transactionId
    assert transactions.end_message_id({"msgId": written, "transactionId": TX}, TX) == ""


def test_no_msg_id_names_no_unique_key() -> None:
    assert transactions.end_message_id({}, TX) == ""


@pytest.mark.parametrize(
    ("written", "true"),
    [("true", True), ("1", True), ("True", True), ("false", False), ("0", False), ("yes", False)],
)
def test_boolean_header_fields_in_java_and_cpp_spellings(written: str, true: bool) -> None:
    # the C++ client's SEND_MESSAGE of a batch carries batch=1 (the Java client's V2 m=true)
    assert codec.true_field({"batch": written}, "batch") is true
    assert codec.true_field({}, "batch") is False
