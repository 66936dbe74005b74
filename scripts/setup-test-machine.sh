#!/usr/bin/env bash
# Everything the tests need on a Debian/Ubuntu machine, a fresh one included; run as root (sudo).
# README.md (Set up) names it and .ci/run runs it. Safe to run again: it installs only what is missing.
#   1. apt: the system tools the tests and the lab use (each with why, below);
#   2. .venv: this checkout, editable, with the test tools (pytest, hypothesis, ruff, mypy): the README's
#      install line. Under sudo it is made as the user who ran sudo, so the checkout stays theirs.
# Python 3.11+ (Debian 12, Ubuntu 24.04 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "$0: run it as root (sudo $0): it installs system packages" >&2
  exit 2
fi

PACKAGES=(
  python3-venv                    # the venv below
  sudo openssh-client openssh-server  # the SSH and privilege paths: tests/engine/test_ssh.py runs a real sshd
                                  # (its tests skip without /usr/sbin/sshd)
  iproute2 debootstrap            # the lab: network namespaces and bridges, its Debian image
  util-linux mount                # unshare, nsenter, setpriv, overlay mounts: the lab and the README's sandbox
  systemd                         # systemctl: the demo enables its boot unit offline
  git                             # the README test's fresh copy of the checkout (git ls-files)
  gcc libc6-dev                    # the lab: its pyxis plugin, compiled against the lab's Slurm (provision_lab/stack_pyxis.py)
)
if command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
else
  echo "$0: no apt-get here: install these (or your system's names for them) yourself: ${PACKAGES[*]}" >&2
fi

as_user=()
if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
  as_user=(sudo -u "$SUDO_USER" --)
fi
"${as_user[@]}" python3 -m venv .venv
"${as_user[@]}" .venv/bin/pip install -q --upgrade pip >/dev/null
"${as_user[@]}" .venv/bin/pip install -q -e '.[test]'
# The venv is not active in the shell that ran this: say how to put provision on PATH (README, Set up).
echo "$0: done. provision is .venv/bin/provision; '. .venv/bin/activate' puts it on PATH in your shell." >&2
