"""``gannet broker run --tier-*``: checked in one place, every problem named before any start."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from gannet.node.broker import tiering
from gannet.node.cli import broker_tier
from gannet.node.cli import root as cli
from gannet.node.store.tier import credentials_file, reading

GOOD = "aws_access_key_id = AK\naws_secret_access_key = SK\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("aws_access_key_id = AK\n", "aws_secret_access_key missing"),
        ("aws_access_key_id = AK\naws_secret_access_key =\n", "line 2: aws_secret_access_key is"),
        ("user = x\n", "line 1: expected 'aws_access_key_id = ...'"),
        (GOOD + "aws_access_key_id = again\n", "line 3: aws_access_key_id is given twice"),
    ],
)
def test_credentials_file_problems_are_named(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        credentials_file.parse(text, "creds")


def test_credentials_file_takes_the_aws_cli_spelling_and_hides_the_secret() -> None:
    parsed = credentials_file.parse("# tier\n[default]\n" + GOOD, "creds")
    assert (parsed.access_key, parsed.secret_key) == ("AK", "SK")
    assert "SK" not in repr(parsed)


def test_credentials_file_of_several_profiles_takes_default_or_names_the_ambiguity() -> None:
    other = "[ci]\naws_access_key_id = CI\naws_secret_access_key = CS\naws_session_token = T\n"
    parsed = credentials_file.parse(other + "[default]\n" + GOOD, "creds")
    assert (parsed.access_key, parsed.secret_key) == ("AK", "SK")
    only = credentials_file.parse("[ci]\n" + GOOD, "creds")
    assert only.access_key == "AK"
    with pytest.raises(ValueError, match=r"several profiles \['ci', 'dev'\] and no \[default\]"):
        credentials_file.parse(other + "[dev]\n" + GOOD, "creds")


def _options(tmp_path: Path, **given: str | None) -> dict[str, object]:
    credentials = tmp_path / "creds"
    credentials.write_text(GOOD)
    values: dict[str, object] = {
        "tier_endpoint": "http://127.0.0.1:8333",
        "tier_bucket": "b",
        "tier_prefix": "gannet/c1/g0",
        "tier_credentials_file": credentials,
        "tier_region": "us-east-1",
        "tier_offload_after_s": 60.0,
        "tier_offload_disk_ratio": 0.5,
        "tier_local_retention_bytes": 1024,
        "tier_uploads_per_pass": 2,
        "tier_pass_interval_s": 1.0,
    }
    values.update(given)
    return values


def test_options_make_the_tier_config(tmp_path: Path) -> None:
    config = broker_tier.tier_config(**_options(tmp_path))  # type: ignore[arg-type]
    assert config is not None
    assert (config.bucket.endpoint_url, config.bucket.bucket, config.prefix) == (
        "http://127.0.0.1:8333",
        "b",
        "gannet/c1/g0",
    )
    assert (config.bucket.access_key, config.bucket.secret_key) == ("AK", "SK")
    policy = config.policy
    assert (policy.offload_age_s_min, policy.local_use_ratio_max) == (60.0, 0.5)
    assert (policy.local_keep_bytes, policy.uploads_max, config.pass_interval_s) == (1024, 2, 1.0)
    assert (policy.remote_retention_s, policy.remote_bytes_max) == (None, None)
    assert (config.sweep_interval_s, config.orphan_grace_s) == (600.0, 3600.0)
    remote = broker_tier.tier_config(
        **_options(tmp_path),  # type: ignore[arg-type]
        tier_remote_retention_s=86400.0,
        tier_remote_bytes_max=1 << 30,
        tier_sweep_interval_s=30.0,
        tier_orphan_grace_s=120.0,
    )
    assert remote is not None
    assert (remote.policy.remote_retention_s, remote.policy.remote_bytes_max) == (86400.0, 1 << 30)
    assert (remote.sweep_interval_s, remote.orphan_grace_s) == (30.0, 120.0)
    forever = broker_tier.tier_config(
        **_options(tmp_path),  # type: ignore[arg-type]
        tier_remote_retention_s=0.0,
        tier_remote_bytes_max=0,
    )
    assert forever is not None, "0 means keep forever / no limit"
    assert (forever.policy.remote_retention_s, forever.policy.remote_bytes_max) == (None, None)
    assert config.reads == reading.ReadOptions()  # 64 MiB in memory, 1 GiB on disk
    sized = broker_tier.tier_config(
        **_options(tmp_path, tier_cache_bytes=0, tier_memory_cache_bytes=8 << 20)  # type: ignore[arg-type]
    )
    assert sized is not None
    assert (sized.reads.disk_cache_bytes_max, sized.reads.memory_cache_bytes_max) == (0, 8 << 20)
    nothing = _options(
        tmp_path,
        tier_endpoint=None,
        tier_bucket=None,
        tier_prefix=None,
        tier_credentials_file=None,
        tier_region=None,
    )
    assert broker_tier.tier_config(**nothing) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--tier-bucket", "b"], "--tier-bucket needs --tier-endpoint"),
        (["--tier-bucket", ""], "--tier-bucket needs --tier-endpoint"),
        (["--tier-region", "eu-west-1"], "--tier-region needs --tier-endpoint"),
        (["--tier-endpoint", "http://127.0.0.1:1"], "--tier-endpoint needs --tier-bucket"),
        (
            ["--tier-endpoint", "http://127.0.0.1:1", "--tier-bucket", "b"],
            "--tier-endpoint needs --tier-prefix",
        ),
        (
            [
                "--tier-endpoint",
                "ftp://x",
                "--tier-bucket",
                "b",
                "--tier-prefix",
                "p",
                "--tier-credentials-file",
                "{creds}",
            ],
            "is not an http(s) URL",
        ),
        (
            [
                "--tier-endpoint",
                "http://h:1",
                "--tier-bucket",
                "b",
                "--tier-prefix",
                "a//b",
                "--tier-credentials-file",
                "{creds}",
            ],
            "has segment ''",
        ),
        (
            [
                "--tier-endpoint",
                "http://h:1",
                "--tier-bucket",
                "b",
                "--tier-prefix",
                "p",
                "--tier-credentials-file",
                "{missing}",
            ],
            "cannot read",
        ),
        (["--tier-offload-disk-ratio", "1.5"], "--tier-offload-disk-ratio"),
        (["--tier-remote-retention-s", "60"], "--tier-remote-retention-s needs --tier-endpoint"),
        (["--tier-remote-bytes-max", "0"], "--tier-remote-bytes-max needs --tier-endpoint"),
        (["--tier-remote-bytes-max", "-1"], "--tier-remote-bytes-max"),
        (["--tier-orphan-grace-s", "5"], "--tier-orphan-grace-s"),
        (["--tier-cache-bytes", "-1"], "--tier-cache-bytes"),
        (["--tier-memory-cache-bytes", "4096"], "--tier-memory-cache-bytes"),
    ],
)
def test_broker_run_refuses_bad_tier_options(tmp_path: Path, args: list[str], problem: str) -> None:
    credentials = tmp_path / "creds"
    credentials.write_text(GOOD)
    filled = [a.format(creds=credentials, missing=tmp_path / "nope") for a in args]
    result = CliRunner().invoke(
        cli.main, ["broker", "run", "--data-dir", str(tmp_path / "store"), *filled]
    )
    assert result.exit_code == 2, result.output
    assert problem in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "store").exists(), "refused before the store was opened"


def test_the_broker_reader_caches_on_disk_under_the_store_unless_sized_zero(
    tmp_path: Path,
) -> None:
    config = broker_tier.tier_config(**_options(tmp_path, tier_cache_bytes=1 << 20))  # type: ignore[arg-type]
    assert config is not None
    source = tiering.ManifestSource(tmp_path / "store", config.prefix)
    reader = tiering.reader(config, source, tmp_path / "store")
    assert reader.disk_cache is not None
    assert reader.disk_cache.directory == tmp_path / "store" / "tiercache"
    assert reader.disk_cache.bytes_max == 1 << 20
    assert (tmp_path / "store" / "tiercache").is_dir()
    reader.close()
    memory_only = dataclasses.replace(
        config, reads=dataclasses.replace(config.reads, disk_cache_bytes_max=0)
    )
    reader = tiering.reader(memory_only, source, tmp_path / "other")
    assert reader.disk_cache is None
    assert not (tmp_path / "other").exists()
    reader.close()
