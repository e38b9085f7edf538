"""What ``gannet broker run``'s options say: :class:`BrokerOptions` holds them as given, and
:func:`broker_config` is the one place they are checked together and turned into a
:class:`~gannet.node.broker.serving.BrokerConfig` (store, cleanup policy, auth, TLS,
transactions, broker groups, the tier, and the Raft group: ``--node-id``/``--peers``,
``--join``, peer TLS or a peer secret). Every problem is a ``click.BadParameter`` naming the
option; nothing is opened or started here.

Used by :mod:`gannet.node.cli.broker`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from gannet.node.broker import serving
from gannet.node.broker_groups import polling as group_polling
from gannet.node.cli import broker_tier, options
from gannet.node.metrics import http_serving
from gannet.node.protocol import tls
from gannet.node.replication import config as replication_config
from gannet.node.replication import peer_auth
from gannet.node.store.config import FlushMode, StoreConfig
from gannet.node.store.upkeep import cleaning
from gannet.node.transactions.book import CheckLimits

INDEX_ITEMS_PER_SLOT = 4
"""Index entries per hash slot, RocketMQ's ratio (maxIndexNum / maxHashSlotNum); ``gannet
store`` infers the slots of an existing index file from it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerOptions:
    """The options of ``gannet broker run`` as click parsed them (names as the options')."""

    data_dir: Path
    flush: str
    file_size_mb: int
    index_hash_slots: int
    listen: str
    remoting_port: int | None
    nameserver_port: int | None
    external_addresses: Path | None
    external_remoting_port: int | None
    cluster_name: str
    broker_name: str
    auto_create_topics: bool
    auto_create_groups: bool
    metrics_listen: str
    auth_file: Path | None
    auth_skew_s: float
    tls_cert: Path | None
    tls_key: Path | None
    tls_client_ca: Path | None
    node_id: int | None
    peers: str | None
    join: bool
    peer_listen: str | None
    peer_tls_cert: Path | None
    peer_tls_key: Path | None
    peer_tls_ca: Path | None
    force_recover: bool
    peer_secret_file: Path | None
    insecure_peers: bool
    file_reserved_hours: float
    delete_when: str
    disk_max_used_ratio_percent: int
    disk_clean_forcibly_ratio: float
    disk_warning_ratio: float
    disk_hysteresis_percentage_points: float
    delete_unconsumed: bool
    dedup_window_s: float
    transaction_timeout_ms: int
    transaction_check_interval_ms: int
    transaction_check_max: int
    cluster_seeds: str
    cluster_access_key: str | None
    cluster_secret_key: str | None
    cluster_tls_ca: Path | None
    tier: dict[str, Any]
    """The ``--tier-*`` options (:mod:`gannet.node.cli.broker_tier`)."""

    @classmethod
    def of(cls, values: dict[str, Any]) -> BrokerOptions:
        """From click's keyword arguments (an unknown or missing name is a TypeError)."""
        tier = {name: value for name, value in values.items() if name.startswith("tier_")}
        rest = {name: value for name, value in values.items() if not name.startswith("tier_")}
        return cls(tier=tier, **rest)


def broker_config(o: BrokerOptions) -> serving.BrokerConfig:
    """The broker the options describe, every option checked (module docstring)."""
    tier_config = broker_tier.tier_config(**o.tier)
    try:
        options.check_endpoint(o.listen, port_min=0)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--listen") from None
    host, _, port_text = o.listen.rpartition(":")
    if o.metrics_listen:
        try:
            http_serving.parse_listen(o.metrics_listen)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--metrics-listen") from None
    peer_tls = _peer_tls(o.peer_tls_cert, o.peer_tls_key, o.peer_tls_ca)
    try:
        seeds = group_polling.parse_seeds(o.cluster_seeds)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cluster-seeds") from None
    if bool(o.cluster_access_key) != bool(o.cluster_secret_key):
        raise click.BadParameter(
            "give both --cluster-access-key and --cluster-secret-key (or GANNET_CLUSTER_ACCESS_KEY"
            " and GANNET_CLUSTER_SECRET_KEY), or neither",
            param_hint="--cluster-access-key",
        )
    policy = cleaning.CleanPolicy(
        o.file_reserved_hours,
        o.delete_when,
        o.disk_max_used_ratio_percent,
        o.disk_warning_ratio,
        o.disk_clean_forcibly_ratio,
        o.delete_unconsumed,
        o.disk_hysteresis_percentage_points,
    )
    try:
        policy.validate(_option_name)
    except cleaning.PolicyError as exc:
        raise click.BadParameter(str(exc), param_hint=_option_name(exc.field_name)) from None
    config = StoreConfig(
        root_dir=o.data_dir,
        flush_mode=FlushMode.SYNC_FLUSH if o.flush == "sync" else FlushMode.ASYNC_FLUSH,
        commitlog_file_size_bytes=o.file_size_mb * 1024 * 1024,
        index_hash_slots=o.index_hash_slots,
        index_items_max=INDEX_ITEMS_PER_SLOT * o.index_hash_slots,
        cluster_name=o.cluster_name,
        broker_name=o.broker_name,
        store_host=host.strip("[]") if host not in ("0.0.0.0", "::", "[::]") else "127.0.0.1",
        store_port=int(port_text),
        force_recover=o.force_recover,
        file_reserved_hours=o.file_reserved_hours,
        delete_when=o.delete_when,
        disk_max_used_ratio_percent=o.disk_max_used_ratio_percent,
        disk_warning_ratio=o.disk_warning_ratio,
        disk_clean_forcibly_ratio=o.disk_clean_forcibly_ratio,
        disk_hysteresis_percentage_points=o.disk_hysteresis_percentage_points,
        delete_unconsumed=o.delete_unconsumed,
    )
    return serving.with_listen(
        serving.BrokerConfig(
            store=config,
            auto_create_topics=o.auto_create_topics,
            auto_create_groups=o.auto_create_groups,
            metrics_listen=o.metrics_listen or None,
            auth_file=o.auth_file,
            auth_skew_s=o.auth_skew_s,
            tls_cert=o.tls_cert,
            tls_key=o.tls_key,
            tls_client_ca=o.tls_client_ca,
            dedup_window_s=o.dedup_window_s,
            transaction_limits=CheckLimits(
                o.transaction_timeout_ms, o.transaction_check_interval_ms, o.transaction_check_max
            ),
            cluster_seeds=seeds,
            cluster_access_key=o.cluster_access_key or None,
            cluster_secret_key=o.cluster_secret_key or None,
            cluster_tls_ca=o.cluster_tls_ca,
            remoting_port=o.remoting_port,
            nameserver_port=o.nameserver_port,
            external_addresses=o.external_addresses,
            external_remoting_port=o.external_remoting_port,
            tier=tier_config,
            replication=_replication(
                o.node_id,
                o.peers,
                o.peer_listen,
                host,
                peer_tls,
                _peer_secret(o.peer_secret_file),
                insecure_peers=o.insecure_peers,
                join=o.join,
                client_port=int(port_text),
            ),
        ),
        o.listen,
    )


def _peer_tls(
    cert: Path | None, key: Path | None, ca: Path | None
) -> replication_config.PeerTls | None:
    given = [cert, key, ca]
    if all(p is None for p in given):
        return None
    if cert is None or key is None or ca is None:
        raise click.BadParameter(
            "peer TLS needs all three of --peer-tls-cert, --peer-tls-key, --peer-tls-ca"
        )
    try:
        for path, what in ((cert, "certificate"), (key, "private key"), (ca, "cluster CA")):
            tls.read_pem(path, what)
    except tls.TlsFileError as exc:
        raise click.BadParameter(str(exc)) from None
    return replication_config.PeerTls(cert, key, ca)


def _peer_secret(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return peer_auth.load_secret(path)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--peer-secret-file") from None


def _replication(
    node_id: int | None,
    peers: str | None,
    peer_listen: str | None,
    host: str,
    peer_tls: replication_config.PeerTls | None = None,
    peer_secret: bytes | None = None,
    *,
    insecure_peers: bool = False,
    join: bool = False,
    client_port: int = 8081,
) -> replication_config.ReplicationConfig | None:
    if join:
        return _joining(
            node_id, peers, peer_listen, host, peer_tls, peer_secret, insecure_peers, client_port
        )
    if node_id is None and peers is None:
        if peer_listen is not None or peer_tls is not None or peer_secret is not None:
            raise click.BadParameter(
                "needs --node-id and --peers", param_hint="--peer-listen/--peer-tls-*"
            )
        return None
    if node_id is None or peers is None:
        raise click.BadParameter("give both --node-id and --peers (or neither)")
    try:
        members = replication_config.parse_peers(peers)
        config = replication_config.ReplicationConfig(
            node_id=node_id,
            peers=members,
            peer_listen=peer_listen or f"{host}:{replication_config.PEER_PORT_DEFAULT}",
            peer_tls=peer_tls,
            peer_secret=peer_secret,
        )
    except replication_config.ReplicationConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--peers") from None
    if len(members) > 1 and peer_tls is None and peer_secret is None and not insecure_peers:
        raise click.BadParameter(
            "a group of several members needs peer authentication: --peer-secret-file (the "
            "same secret on every member) or --peer-tls-*; --insecure-peers only on a trusted "
            "test network",
            param_hint="--peer-secret-file",
        )
    return config


def _joining(
    node_id: int | None,
    peers: str | None,
    peer_listen: str | None,
    host: str,
    peer_tls: replication_config.PeerTls | None,
    peer_secret: bytes | None,
    insecure_peers: bool,
    client_port: int,
) -> replication_config.ReplicationConfig:
    """``--join``: this node alone, with its own addresses; the group comes from the log."""
    if node_id is None:
        raise click.BadParameter("--join needs --node-id (an id never used in the group before)")
    listen = peer_listen or f"{host}:{replication_config.PEER_PORT_DEFAULT}"
    try:
        if peers is None:
            me = replication_config.parse_peer(f"{node_id}={listen}/{client_port}")
        else:
            named = {p.node_id: p for p in replication_config.parse_peers(peers)}
            if node_id not in named:
                raise click.BadParameter(
                    f"--peers does not name --node-id {node_id}; with --join it only needs this "
                    "node's own id=host:peer_port/client_port",
                    param_hint="--peers",
                )
            me = named[node_id]
        config = replication_config.ReplicationConfig(
            node_id=node_id,
            peers=(me,),
            peer_listen=listen,
            peer_tls=peer_tls,
            peer_secret=peer_secret,
            join=True,
        )
    except replication_config.ReplicationConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--peers/--peer-listen") from None
    if peer_tls is None and peer_secret is None and not insecure_peers:
        raise click.BadParameter(
            "a joining member needs the group's peer authentication: --peer-secret-file or "
            "--peer-tls-*; --insecure-peers only on a trusted test network",
            param_hint="--peer-secret-file",
        )
    return config


def _option_name(field_name: str) -> str:
    """A :class:`cleaning.CleanPolicy` field as this command's option (``--disk-warning-ratio``)."""
    return "--" + field_name.replace("_", "-")
