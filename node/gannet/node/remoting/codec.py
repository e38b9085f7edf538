"""RemotingCommand frames: RocketMQ's remoting wire format (``docs/formats/remoting.md``).

A frame is ``int32 length`` (of what follows), ``int32 mark`` — the serialize type in the high
byte (0 JSON, 1 ROCKETMQ binary), the header length in the low three — then the header, then the
body. Every length is checked against :class:`Limits` *before* anything is read or allocated
for it, and a bad frame raises :class:`FrameError` naming the field; the connection is then
closed (a stream cannot be resynchronised after a bad length).

The JSON header is a flat object ``{code, language, version, opaque, flag, remark,
extFields}`` (Java's fastjson writes ``serializeTypeCurrentRPC`` too); the ROCKETMQ header is
``code:u16 language:u8 version:u16 opaque:i32 flag:i32 remarkLen:i32 remark extLen:i32 ext``
with ``ext`` a run of ``keyLen:u16 key valLen:i32 val``. Both are big-endian. A response
answers in the serialize type of its request.

Pure functions and a dataclass; no I/O.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1

FLAG_RESPONSE = 1
FLAG_ONEWAY = 2

FRAME_BYTES_MAX = 16 * 1024 * 1024  # RocketMQ's com.rocketmq.remoting.frameMaxLength
HEADER_BYTES_MAX = 256 * 1024
EXT_FIELDS_MAX = 256

LANGUAGES = (
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY",
    "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS",
)  # fmt: skip
_LANGUAGE_CODES = {name: number for number, name in enumerate(LANGUAGES)}
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

_MARK = struct.Struct(">iI")
_BINARY_FIXED = struct.Struct(">HBHiii")


class FrameError(ValueError):
    """A frame that breaks the format or a limit; the message names what."""


@dataclass(frozen=True, slots=True)
class Limits:
    frame_bytes_max: int = FRAME_BYTES_MAX
    header_bytes_max: int = HEADER_BYTES_MAX


DEFAULT_LIMITS = Limits()


@dataclass(slots=True)
class Command:
    """One RemotingCommand, request or response."""

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    language: str = "JAVA"
    version: int = 0
    serialize_type: int = SERIALIZE_JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def response(
        self,
        code: int,
        remark: str | None = None,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> Command:
        """The response to this request: same opaque and serialize type, response flag set."""
        return Command(
            code=code,
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext=dict(ext or {}),
            body=body,
            language="JAVA",
            version=self.version,
            serialize_type=self.serialize_type,
        )


def frame_length(prefix: bytes, limits: Limits = DEFAULT_LIMITS) -> int:
    """The length field of a frame (its first 4 bytes), checked: what follows it."""
    length = int(struct.unpack(">i", prefix)[0])
    if length < 4:
        raise FrameError(f"frame length {length} is below 4 (the header-length field)")
    if length > limits.frame_bytes_max:
        raise FrameError(f"frame length {length} exceeds {limits.frame_bytes_max} bytes")
    return length


def decode_frame(frame: bytes, limits: Limits = DEFAULT_LIMITS) -> Command:
    """One command from ``frame``: what follows the length field (``frame_length`` bytes)."""
    if len(frame) < 4:
        raise FrameError(f"frame of {len(frame)} bytes has no header-length field")
    if len(frame) > limits.frame_bytes_max:
        raise FrameError(f"frame of {len(frame)} bytes exceeds {limits.frame_bytes_max} bytes")
    (mark,) = struct.unpack_from(">I", frame)
    serialize_type, header_length = mark >> 24, mark & 0xFFFFFF
    if serialize_type not in (SERIALIZE_JSON, SERIALIZE_ROCKETMQ):
        raise FrameError(f"serialize type {serialize_type} is neither 0 (JSON) nor 1 (ROCKETMQ)")
    if header_length > limits.header_bytes_max:
        raise FrameError(f"header length {header_length} exceeds {limits.header_bytes_max} bytes")
    if header_length > len(frame) - 4:
        raise FrameError(
            f"header length {header_length} exceeds the {len(frame) - 4} bytes of the frame"
        )
    header = frame[4 : 4 + header_length]
    body = frame[4 + header_length :]
    command = _json_header(header) if serialize_type == SERIALIZE_JSON else _binary_header(header)
    command.body = bytes(body)
    command.serialize_type = serialize_type
    return command


def encode(command: Command) -> bytes:
    """The whole frame of ``command``, length field included."""
    if command.serialize_type == SERIALIZE_ROCKETMQ:
        header = _binary_encode(command)
    else:
        header = _json_encode(command)
    mark = (command.serialize_type << 24) | len(header)
    return _MARK.pack(4 + len(header) + len(command.body), mark) + header + command.body


def _int_field(obj: dict[str, object], name: str, default: int = 0) -> int:
    value = obj.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise FrameError(f"header field {name!r} is {type(value).__name__}, not an integer")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise FrameError(f"header field {name!r} = {value} is outside int32")
    return value


def _json_header(header: bytes) -> Command:
    try:
        obj = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FrameError(f"JSON header does not parse: {exc}") from None
    if not isinstance(obj, dict):
        raise FrameError(f"JSON header is a {type(obj).__name__}, not an object")
    code = _int_field(obj, "code")
    language = obj.get("language", "JAVA")
    if not isinstance(language, str):
        raise FrameError("header field 'language' is not a string")
    remark = obj.get("remark")
    if remark is not None and not isinstance(remark, str):
        raise FrameError("header field 'remark' is not a string")
    raw_ext = obj.get("extFields") or {}
    if not isinstance(raw_ext, dict):
        raise FrameError("header field 'extFields' is not an object")
    if len(raw_ext) > EXT_FIELDS_MAX:
        raise FrameError(f"extFields has {len(raw_ext)} entries; at most {EXT_FIELDS_MAX}")
    ext: dict[str, str] = {}
    for key, value in raw_ext.items():
        if isinstance(value, (dict, list)):
            raise FrameError(f"extFields[{key!r}] is not a scalar")
        if value is None:
            continue
        ext[key] = _scalar_text(value)
    return Command(
        code=code,
        opaque=_int_field(obj, "opaque"),
        flag=_int_field(obj, "flag"),
        remark=remark,
        ext=ext,
        language=language,
        version=_int_field(obj, "version"),
    )


def true_field(ext: dict[str, str], name: str) -> bool:
    """A boolean header field as the clients write it: ``true`` (Java, Go; a JSON ``true`` is
    read as that) or ``1`` (the C++ client prints its booleans as numbers); anything else,
    and no field, is false."""
    return ext.get(name, "").strip().lower() in ("true", "1")


def _scalar_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _json_encode(command: Command) -> bytes:
    obj: dict[str, object] = {
        "code": command.code,
        "language": command.language,
        "version": command.version,
        "opaque": command.opaque,
        "flag": command.flag,
        "serializeTypeCurrentRPC": "JSON",
    }
    if command.remark is not None:
        obj["remark"] = command.remark
    if command.ext:
        obj["extFields"] = command.ext
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _binary_header(header: bytes) -> Command:
    if len(header) < _BINARY_FIXED.size + 4:
        raise FrameError(f"ROCKETMQ header of {len(header)} bytes is shorter than its fixed part")
    code, language, version, opaque, flag, remark_length = _BINARY_FIXED.unpack_from(header)
    pos = _BINARY_FIXED.size
    remark: str | None = None
    if remark_length < 0 or remark_length > len(header) - pos:
        raise FrameError(f"remark length {remark_length} runs past the header")
    if remark_length:
        remark = _text(header[pos : pos + remark_length], "remark")
    pos += remark_length
    if len(header) - pos < 4:
        raise FrameError("ROCKETMQ header ends before the extFields length")
    (ext_length,) = struct.unpack_from(">i", header, pos)
    pos += 4
    if ext_length < 0 or ext_length != len(header) - pos:
        raise FrameError(
            f"extFields length {ext_length} does not match the {len(header) - pos} bytes left"
        )
    ext: dict[str, str] = {}
    end = pos + ext_length
    while pos < end:
        if end - pos < 2:
            raise FrameError("extFields entry ends inside its key length")
        (key_length,) = struct.unpack_from(">H", header, pos)
        pos += 2
        if key_length > end - pos:
            raise FrameError(f"extFields key length {key_length} runs past the header")
        key = _text(header[pos : pos + key_length], "extFields key")
        pos += key_length
        if end - pos < 4:
            raise FrameError("extFields entry ends inside its value length")
        (value_length,) = struct.unpack_from(">i", header, pos)
        pos += 4
        if value_length < 0 or value_length > end - pos:
            raise FrameError(f"extFields value length {value_length} runs past the header")
        ext[key] = _text(header[pos : pos + value_length], "extFields value")
        pos += value_length
        if len(ext) > EXT_FIELDS_MAX:
            raise FrameError(f"extFields has more than {EXT_FIELDS_MAX} entries")
    name = LANGUAGES[language] if language < len(LANGUAGES) else "OTHER"
    return Command(
        code=code, opaque=opaque, flag=flag, remark=remark, ext=ext, language=name,
        version=version,
    )  # fmt: skip


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrameError(f"{what} is not UTF-8: {exc}") from None


def _binary_encode(command: Command) -> bytes:
    remark = (command.remark or "").encode("utf-8")
    parts = [
        _BINARY_FIXED.pack(
            command.code & 0xFFFF,
            _LANGUAGE_CODES.get(command.language, _LANGUAGE_CODES["OTHER"]),
            command.version & 0xFFFF,
            command.opaque,
            command.flag,
            len(remark),
        ),
        remark,
    ]
    ext = bytearray()
    for key, value in command.ext.items():
        k, v = key.encode("utf-8"), value.encode("utf-8")
        ext += struct.pack(">H", len(k)) + k + struct.pack(">i", len(v)) + v
    parts.append(struct.pack(">i", len(ext)))
    parts.append(bytes(ext))
    return b"".join(parts)
