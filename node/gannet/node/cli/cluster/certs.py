"""The certificate files each member of a local TLS cluster runs with (no IO):
:class:`ClusterTls` maps member names to their certificate and key, and gives the
``gannet broker run`` options of one member.

Made by :mod:`pki` (generated or the user's own files, checked),
chosen by :mod:`tls`, used by :mod:`commands` to start
members.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class MemberFiles:
    cert_file: Path
    key_file: Path


@dataclass(frozen=True, slots=True)
class ClusterTls:
    """What every member of a local cluster runs with when TLS is on."""

    ca_file: Path
    members: dict[str, MemberFiles]
    """Member name (:func:`~gannet.node.cli.cluster.tls.member_name`) → its certificate and key."""

    def argv(self, member: str) -> list[str]:
        """The ``gannet broker run`` options of ``member``: client TLS, peer mTLS, and the CA
        of the other groups' client ports."""
        own = self.members[member]
        cert, key, ca = str(own.cert_file), str(own.key_file), str(self.ca_file)
        return [
            *("--tls-cert", cert, "--tls-key", key),
            *("--peer-tls-cert", cert, "--peer-tls-key", key, "--peer-tls-ca", ca),
            *("--cluster-tls-ca", ca),
        ]
