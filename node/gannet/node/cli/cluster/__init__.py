"""``gannet cluster``: a local cluster for development and the commands on a running one.

:mod:`commands` is the ``gannet cluster`` group (``up``, ``status``), with
:mod:`member_commands` (``member list|add|remove``) and :mod:`cert_commands` (``certs
list|renew``) registered on it. ``cluster up``'s credentials are :mod:`auth`; its TLS is
:mod:`tls` (which certificate each member runs with), :mod:`pki` (made and checked),
:mod:`certs` (the files of each member) and :mod:`cert_expiry` (expiry and renewal).
:mod:`views` is what ``gannet status`` and ``gannet topic describe`` add for several broker
groups.
"""
