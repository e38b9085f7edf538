#!/usr/bin/env bash
# Installs promtool and the prometheus server binary from Debian's `prometheus` package, for
# `make unit` (tests/metrics runs `promtool check metrics`, `check rules` and `test rules`, and
# the e2e scenario of e2e/prometheus, which starts its own server on a free 127.0.0.1 port) and
# `make e2e-prometheus`. Called by the Makefile only when promtool is missing.
#
# We want the binaries, not the system service: a temporary policy-rc.d (exit 101) forbids the
# package's maintainer scripts to start the daemon, and where systemd runs, the unit is
# disabled and stopped afterwards, so no Prometheus is left listening on :9090.
set -euo pipefail

if [ "$(id -u)" = 0 ]; then
    sudo=()
elif command -v sudo >/dev/null; then
    sudo=(sudo)
else
    echo "promtool is missing; install Debian's prometheus package as root" >&2
    exit 1
fi

policy=/usr/sbin/policy-rc.d
made_policy=
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod 755 "$policy"
    made_policy=1
fi
cleanup() {
    if [ -n "$made_policy" ]; then "${sudo[@]}" rm -f "$policy"; fi
}
trap cleanup EXIT

"${sudo[@]}" apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null

if [ -d /run/systemd/system ]; then
    "${sudo[@]}" systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
command -v promtool >/dev/null
command -v prometheus >/dev/null
promtool --version 2>&1 | head -1
