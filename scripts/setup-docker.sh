#!/usr/bin/env bash
# Make Docker usable for trtmatrix on this host, and build the onnxruntime test images.
#
# 1. If no Docker engine answers: install docker.io (root, apt) and start dockerd.
# 2. Make the base of the onnxruntime images, trtmatrix-test/python:3.11: python:3.11-slim
#    where a registry answers, else Debian bookworm + Python 3.11 made with debootstrap (the
#    same Python minor), carrying the host's CA bundle for TLS-inspecting proxies.
# 3. Build the Dockerfile-based environments that run without a GPU (skips up-to-date ones).
# Safe to run again: every step is skipped when its result is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

LOCAL_BASE=trtmatrix-test/python:3.11

if ! docker info >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        # Not an error for the main job: its docker environments are then reported as skipped.
        echo "setup-docker: no Docker engine answers and this is not a root apt host; docker environments" \
             "will be skipped until Docker runs (then run this script again)" >&2
        exit 0
    fi
    if ! command -v dockerd >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
    fi
    setsid dockerd >/tmp/dockerd.log 2>&1 < /dev/null &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || { echo "setup-docker: dockerd did not start; see /tmp/dockerd.log" >&2; exit 1; }
fi

if ! docker image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
    if timeout 120 docker pull -q python:3.11-slim >/dev/null 2>&1; then
        docker tag python:3.11-slim "$LOCAL_BASE"
    else
        echo "setup-docker: python:3.11-slim cannot be pulled; building $LOCAL_BASE with debootstrap (~1 min)"
        command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
        rootfs=$(mktemp -d)
        # The Debian mirror apt already uses on this host (its sources' URIs: line, or the one-line
        # format's first deb line): no mirror is written down here.
        mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
        [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
        [ -n "$mirror" ] || { echo "setup-docker: no Debian mirror found in apt's sources" >&2; exit 1; }
        debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
            bookworm "$rootfs" "${mirror%% *}" >/tmp/debootstrap.log 2>&1
        # Downloads from containers may pass a TLS-inspecting proxy: carry the host's CA bundle.
        cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
        tar -C "$rootfs" -c . | docker import \
            --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
            --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
            --change 'CMD ["python3"]' - "$LOCAL_BASE" >/dev/null
        rm -rf "$rootfs"
    fi
fi

.venv/bin/trtmatrix images build --no-gpu
