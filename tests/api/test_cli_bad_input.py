"""Every ``gannet`` command, given wrong arguments, answers with one clear line and a documented
exit code, never a traceback.

The test walks the click tree, so a new command is covered the day it is added: each leaf
command runs with an unknown option, without its required parameters, with a wrong value for
each typed option (not a number, out of range, not a choice, a missing file) and with hostile
values for the options and arguments that take free text (endpoints, message ids, times, names,
store directories). Broker commands talk to a live in-process broker; store commands get a real
store directory, so bad values reach the command bodies, not only click's parsing. Commands
that would serve (``broker run``, ``cluster up``) must fail before they start: their start is
replaced by a failure the test reports.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from gannet.node.broker import serving
from gannet.node.cli import exits
from gannet.node.cli import root as cli
from gannet.node.cli.cluster import commands as replication_commands
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.log.records import Message
from gannet.node.store.message_store import MessageStore

DOCUMENTED_EXIT_CODES = {1, 2, 3, 4, 5}
USAGE = 2
STORE_UNAVAILABLE = 3

# free-text options and the wrong values they must refuse (value, exit code)
HOSTILE_OPTION_VALUES: dict[str, list[tuple[str, int]]] = {
    "endpoint": [
        ("", USAGE),
        ("127.0.0.1:99999", USAGE),
        ("foo:bar", USAGE),
        ("http://127.0.0.1:8081", USAGE),
        ("::1:8081", USAGE),
    ],
    "endpoints": [("nohostport", USAGE), ("http://127.0.0.1:8081", USAGE), (",", USAGE)],
    "msg_id": [("nothex", USAGE), ("0102FC", USAGE), ("0102FC0000000136EC0B1878D1000000ZZ", USAGE)],
    "uniq_key": [("nothex", USAGE)],
    "message_id": [("nothex", USAGE), ("", USAGE)],
    "time_text": [("yesterday", USAGE), ("99999-01-01", USAGE)],
    "since": [("yesterday", USAGE)],
    "to_time": [("yesterday", USAGE), ("9999-99-99", USAGE)],
    "listen": [("foo:bar", USAGE), ("127.0.0.1:99999", USAGE), ("", USAGE)],
    "metrics_listen": [("nohostport", USAGE)],
    "peers": [("garbage", USAGE)],
    "peer_listen": [("127.0.0.1:8091", USAGE)],  # without --node-id/--peers
    "broker_endpoint": [("nohostport", USAGE)],
    "invisible_s": [("forever", USAGE), ("-1s", USAGE)],
    "wait_s": [("soon", USAGE)],
    "props": [("novalue", USAGE)],
    "attributes": [("novalue", USAGE), ("=5", USAGE)],
    "delete_when": [("25", USAGE), ("x", USAGE)],
    "cluster_seeds": [("nohostport", USAGE), ("127.0.0.1:0", USAGE)],
    "cluster_access_key": [("key-without-its-secret", USAGE)],
    "cluster_secret_key": [("secret-without-its-key", USAGE)],
    "group_endpoints": [("nohostport", USAGE)],
    # alone, any --tier-* option is wrong usage: a tiered store needs all five
    "tier_bucket": [("", USAGE), ("gannet", USAGE)],
    "tier_endpoint": [("ftp://host", USAGE)],
    "tier_prefix": [("bad prefix!", USAGE)],
    "tier_region": [("us-east-1", USAGE)],  # broker run: a region without --tier-endpoint
    "groups": [
        ("nodir", USAGE),
        ("broker-0={missing}", USAGE),
        ("=/tmp", USAGE),
        ("broker-0={empty}", STORE_UNAVAILABLE),
    ],
}
# free-text options a wrong value cannot be told from a right one for (nothing to check)
FREE_TEXT_OPTIONS = {
    "topic",
    "key",
    "tag",
    "tag_expression",
    "keys",
    "message_group",
    "group_name",
    "topic_name",
    "cluster_name",
    "broker_name",
    "until",
    "master",
    "server",
    "namespaces",
    "access_key",
    "secret_key",
    "topics",
    "host",
}
# hostile values of positional arguments (value, allowed exit codes)
HOSTILE_ARGUMENTS: dict[str, list[tuple[str, set[int]]]] = {
    "name": [("bad name!", {1, 5}), ("", {1, 5})],
    "topic_name": [("bad name!", {1, 5}), ("", {1, 5})],
    "body": [],
    "data_dir": [("{missing}", {STORE_UNAVAILABLE}), ("{empty}", {STORE_UNAVAILABLE}),
                 ("{file}", {USAGE})],
    "source": [("{empty}", {STORE_UNAVAILABLE}), ("{missing}", {USAGE})],
    "paths": [("{empty}", {USAGE})],  # pipeline export: one path and no --group
    "output": [],
    "target": [],
    "spec": [("garbage", {USAGE}), ("4=127.0.0.1:1/2", {5})],  # 5: not a replicated broker
    "node_id": [("0", {USAGE}), ("x", {USAGE}), ("2", {5})],
    "members": [("bad name!", {USAGE}), ("../ca", {USAGE}), ("", {USAGE})],
}  # fmt: skip
# options that complete a command's arguments, so a hostile argument reaches the command body
COMPLETING: dict[tuple[str, ...], tuple[str, ...]] = {
    ("group", "reset-offset"): ("--to-offset", "0"),
    ("message", "query"): ("--key", "k"),
    ("message", "receive"): ("--group", "NoSuchThing", "--topic", "NoSuchThing"),
    ("store", "get"): ("--offset", "0"),
    ("store", "query"): ("--topic", "BadInput", "--key", "k"),
}


@dataclass
class Places:
    store: Path
    empty: Path
    file: Path
    missing: Path

    def fill(self, text: str) -> str:
        return text.format(store=self.store, empty=self.empty, file=self.file, missing=self.missing)


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Places:
    root = tmp_path_factory.mktemp("bad-input")
    store = root / "store"
    with MessageStore(StoreConfig.for_tests(store, flush_mode=FlushMode.SYNC_FLUSH)).open() as st:
        st.put_message(Message(topic="BadInput", body=b"x", properties={"KEYS": "k"}))
    (root / "empty").mkdir()
    (root / "file").write_text("not a directory")
    return Places(store, root / "empty", root / "file", root / "missing")


def leaf_commands(
    group: click.Group, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from leaf_commands(command, (*path, name))
        else:
            yield (*path, name), command


def _filler(param: click.Argument, places: Places) -> str:
    """A well-formed value for a positional argument (so a bad option is what fails)."""
    if param.name in ("data_dir", "source"):
        return str(places.store if param.name == "data_dir" else places.empty)
    if param.name in ("output", "target"):
        return str(places.missing / "out")
    return "NoSuchThing"


def _wrong_values(param: click.Option) -> list[tuple[str, int]]:
    kind = param.type
    if isinstance(kind, click.IntRange | click.FloatRange):
        values = [("x", USAGE)]
        if kind.min is not None:
            values.append((str(kind.min - 1), USAGE))
        if kind.max is not None:
            values.append((str(kind.max + 1), USAGE))
        return values
    if kind in (click.INT, click.FLOAT) or (
        isinstance(kind, click.types.ParamType) and (kind.name == "TIME")
    ):
        return [("x", USAGE)]
    if isinstance(kind, click.Choice):
        return [("no-such-choice", USAGE)]
    if isinstance(kind, click.Path):
        if kind.exists:
            return [("/nonexistent/gannet-file", USAGE)]
        if not kind.file_okay:
            return [("{file}", USAGE)]
        return []
    assert param.name is not None
    if param.name in HOSTILE_OPTION_VALUES:
        return HOSTILE_OPTION_VALUES[param.name]
    assert param.name in FREE_TEXT_OPTIONS, (
        f"option {param.name!r}: add its wrong values to HOSTILE_OPTION_VALUES, or list it in "
        "FREE_TEXT_OPTIONS if any text is right"
    )
    return []


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    codes: frozenset[int]


def cases_of(path: tuple[str, ...], command: click.Command, places: Places) -> list[Case]:
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    options = [p for p in command.params if isinstance(p, click.Option)]
    confirm = ("--yes",) if any(p.name == "yes" for p in options) else ()
    base = tuple(_filler(a, places) for a in arguments)
    cases = [Case((*path, *base, *confirm, "--no-such-option"), frozenset({USAGE}))]
    if any(p.required for p in command.params):
        cases.append(Case((*path, *confirm), frozenset({USAGE})))
    cases.append(Case((*path, *base, *confirm, "extra", "arguments"), frozenset({USAGE})))
    for option in options:
        if option.is_flag or option.name in ("help", "version"):
            continue
        for value, code in _wrong_values(option):
            flag = max(option.opts, key=len)
            argv = (*path, *base, *confirm, flag, places.fill(value))
            cases.append(Case(argv, frozenset({code})))
    for index, argument in enumerate(arguments):
        assert argument.name in HOSTILE_ARGUMENTS, (
            f"argument {argument.name!r} has no hostile values"
        )
        for value, codes in HOSTILE_ARGUMENTS[argument.name]:
            args = list(base)
            args[index] = places.fill(value)
            completing = COMPLETING.get(path, ())
            cases.append(Case((*path, *args, *confirm, *completing), frozenset(codes)))
    return cases


def _refuse_to_start(*_: object, **__: object) -> None:
    raise AssertionError("a command with wrong arguments went on to start a broker")


def test_every_command_answers_bad_input_with_one_line_and_a_documented_code(
    broker, places: Places, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serving, "Broker", _refuse_to_start)
    monkeypatch.setattr(replication_commands, "broker_argv", _refuse_to_start)
    runner = CliRunner(env={"GANNET_ENDPOINT": broker.endpoint, "GANNET_ENDPOINTS": None})
    leaves = list(leaf_commands(cli.main))
    assert len(leaves) >= 25, [p for p, _ in leaves]
    problems: list[str] = []
    count = 0
    for path, command in leaves:
        for case in cases_of(path, command, places):
            count += 1
            result = runner.invoke(cli.main, list(case.argv))
            shown = f"gannet {' '.join(repr(a) for a in case.argv)} -> rc {result.exit_code}"
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                problems.append(f"{shown}: {type(result.exception).__name__}: {result.exception}")
                continue
            if result.exit_code not in case.codes or result.exit_code not in DOCUMENTED_EXIT_CODES:
                problems.append(f"{shown}, expected {sorted(case.codes)}: {result.output!r}")
                continue
            said = [
                line
                for line in result.stderr.splitlines()
                if line.strip() and not line.startswith(("Usage:", "Try '"))
            ]
            if len(said) != 1 or "Traceback" in result.output:
                problems.append(f"{shown}: not one error line: {result.stderr!r}")
    assert not problems, f"{len(problems)} of {count} bad invocations:\n" + "\n".join(problems)


def test_exit_codes_are_documented_in_help() -> None:
    out = CliRunner().invoke(cli.main, ["--help"]).output
    for code, words in (
        (0, "success"),
        (1, "check failed or nothing found"),
        (2, "wrong usage"),
        (3, "store unavailable"),
        (4, "broker unreachable"),
        (5, "broker refused the request"),
    ):
        assert re.search(rf"^\s+{code}\s+{words}", out, re.MULTILINE), out
    assert {code for code, _ in exits.EXIT_CODES} - {0} == DOCUMENTED_EXIT_CODES
    assert exits.EXIT_USAGE == USAGE


READING_COMMANDS = ("list", "describe", "query", "status", "inspect", "get", "verify")


def test_every_list_describe_query_and_status_command_takes_output_format() -> None:
    covered = []
    for path, command in leaf_commands(cli.main):
        if path[0] == "pipeline" or path[-1] not in READING_COMMANDS:
            continue  # pipeline verify prints a Spark job summary, not a listing
        option = next((p for p in command.params if "--output" in p.opts), None)
        assert option is not None, f"gannet {' '.join(path)} has no -o/--output"
        assert "-o" in option.opts
        assert isinstance(option.type, click.Choice)
        assert list(option.type.choices) == ["table", "json", "yaml"]
        covered.append(" ".join(path))
    assert len(covered) >= 11, covered
