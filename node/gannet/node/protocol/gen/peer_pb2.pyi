from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ForwardRequest(_message.Message):
    __slots__ = ("group", "sender", "method", "request", "metadata", "client_peer", "service")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CLIENT_PEER_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    group: str
    sender: int
    method: str
    request: bytes
    metadata: _containers.RepeatedCompositeFieldContainer[MetadataEntry]
    client_peer: str
    service: str
    def __init__(self, group: _Optional[str] = ..., sender: _Optional[int] = ..., method: _Optional[str] = ..., request: _Optional[bytes] = ..., metadata: _Optional[_Iterable[_Union[MetadataEntry, _Mapping]]] = ..., client_peer: _Optional[str] = ..., service: _Optional[str] = ...) -> None: ...

class MetadataEntry(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class ForwardReply(_message.Message):
    __slots__ = ("response", "refusal_code", "refusal_details")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_CODE_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_DETAILS_FIELD_NUMBER: _ClassVar[int]
    response: bytes
    refusal_code: int
    refusal_details: str
    def __init__(self, response: _Optional[bytes] = ..., refusal_code: _Optional[int] = ..., refusal_details: _Optional[str] = ...) -> None: ...

class RaftMessage(_message.Message):
    __slots__ = ("group", "sender", "target", "term", "pre_vote_request", "pre_vote_response", "vote_request", "vote_response", "append_entries", "append_response", "heartbeat", "heartbeat_response", "timeout_now", "reset_log_start")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    VOTE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    VOTE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    APPEND_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    APPEND_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_NOW_FIELD_NUMBER: _ClassVar[int]
    RESET_LOG_START_FIELD_NUMBER: _ClassVar[int]
    group: str
    sender: int
    target: int
    term: int
    pre_vote_request: PreVoteRequest
    pre_vote_response: PreVoteResponse
    vote_request: VoteRequest
    vote_response: VoteResponse
    append_entries: AppendEntries
    append_response: AppendResponse
    heartbeat: Heartbeat
    heartbeat_response: HeartbeatResponse
    timeout_now: TimeoutNow
    reset_log_start: ResetLogStart
    def __init__(self, group: _Optional[str] = ..., sender: _Optional[int] = ..., target: _Optional[int] = ..., term: _Optional[int] = ..., pre_vote_request: _Optional[_Union[PreVoteRequest, _Mapping]] = ..., pre_vote_response: _Optional[_Union[PreVoteResponse, _Mapping]] = ..., vote_request: _Optional[_Union[VoteRequest, _Mapping]] = ..., vote_response: _Optional[_Union[VoteResponse, _Mapping]] = ..., append_entries: _Optional[_Union[AppendEntries, _Mapping]] = ..., append_response: _Optional[_Union[AppendResponse, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., heartbeat_response: _Optional[_Union[HeartbeatResponse, _Mapping]] = ..., timeout_now: _Optional[_Union[TimeoutNow, _Mapping]] = ..., reset_log_start: _Optional[_Union[ResetLogStart, _Mapping]] = ...) -> None: ...

class PreVoteRequest(_message.Message):
    __slots__ = ("last_term", "last_offset")
    LAST_TERM_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    last_term: int
    last_offset: int
    def __init__(self, last_term: _Optional[int] = ..., last_offset: _Optional[int] = ...) -> None: ...

class PreVoteResponse(_message.Message):
    __slots__ = ("granted",)
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    granted: bool
    def __init__(self, granted: bool = ...) -> None: ...

class VoteRequest(_message.Message):
    __slots__ = ("last_term", "last_offset", "transfer")
    LAST_TERM_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_FIELD_NUMBER: _ClassVar[int]
    last_term: int
    last_offset: int
    transfer: bool
    def __init__(self, last_term: _Optional[int] = ..., last_offset: _Optional[int] = ..., transfer: bool = ...) -> None: ...

class VoteResponse(_message.Message):
    __slots__ = ("granted",)
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    granted: bool
    def __init__(self, granted: bool = ...) -> None: ...

class AppendEntries(_message.Message):
    __slots__ = ("prev_offset", "prev_term", "end_offset", "entries_term", "leader_commit", "payload", "leader_clock_ms")
    PREV_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PREV_TERM_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_COMMIT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    LEADER_CLOCK_MS_FIELD_NUMBER: _ClassVar[int]
    prev_offset: int
    prev_term: int
    end_offset: int
    entries_term: int
    leader_commit: int
    payload: bytes
    leader_clock_ms: int
    def __init__(self, prev_offset: _Optional[int] = ..., prev_term: _Optional[int] = ..., end_offset: _Optional[int] = ..., entries_term: _Optional[int] = ..., leader_commit: _Optional[int] = ..., payload: _Optional[bytes] = ..., leader_clock_ms: _Optional[int] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("success", "match_offset", "durable_offset", "rejected_prev_offset", "hint_term", "hint_offset")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    MATCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DURABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REJECTED_PREV_OFFSET_FIELD_NUMBER: _ClassVar[int]
    HINT_TERM_FIELD_NUMBER: _ClassVar[int]
    HINT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    success: bool
    match_offset: int
    durable_offset: int
    rejected_prev_offset: int
    hint_term: int
    hint_offset: int
    def __init__(self, success: bool = ..., match_offset: _Optional[int] = ..., durable_offset: _Optional[int] = ..., rejected_prev_offset: _Optional[int] = ..., hint_term: _Optional[int] = ..., hint_offset: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("leader_commit", "leader_clock_ms")
    LEADER_COMMIT_FIELD_NUMBER: _ClassVar[int]
    LEADER_CLOCK_MS_FIELD_NUMBER: _ClassVar[int]
    leader_commit: int
    leader_clock_ms: int
    def __init__(self, leader_commit: _Optional[int] = ..., leader_clock_ms: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("match_offset", "durable_offset")
    MATCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DURABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    match_offset: int
    durable_offset: int
    def __init__(self, match_offset: _Optional[int] = ..., durable_offset: _Optional[int] = ...) -> None: ...

class TimeoutNow(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResetLogStart(_message.Message):
    __slots__ = ("start_offset", "start_term", "leader_commit", "membership")
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    START_TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_COMMIT_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_FIELD_NUMBER: _ClassVar[int]
    start_offset: int
    start_term: int
    leader_commit: int
    membership: Membership
    def __init__(self, start_offset: _Optional[int] = ..., start_term: _Optional[int] = ..., leader_commit: _Optional[int] = ..., membership: _Optional[_Union[Membership, _Mapping]] = ...) -> None: ...

class Membership(_message.Message):
    __slots__ = ("start_offset", "end_offset", "voters", "learners", "body")
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    LEARNERS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    start_offset: int
    end_offset: int
    voters: _containers.RepeatedScalarFieldContainer[int]
    learners: _containers.RepeatedScalarFieldContainer[int]
    body: bytes
    def __init__(self, start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., voters: _Optional[_Iterable[int]] = ..., learners: _Optional[_Iterable[int]] = ..., body: _Optional[bytes] = ...) -> None: ...

class DeliverSummary(_message.Message):
    __slots__ = ("messages_received",)
    MESSAGES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    messages_received: int
    def __init__(self, messages_received: _Optional[int] = ...) -> None: ...
