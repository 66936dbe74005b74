#!/bin/sh
# The peers' own venv, outside the repository (Ansible and pyinfra are not project dependencies):
#   sudo sh benchmarks/peers/setup.sh        # -> /var/cache/provision-bench/venv
#   VENV=DIR PYTHON=python3.12 sh benchmarks/peers/setup.sh
# ansible-core 2.20+ needs Python >= 3.12 on the controller (the nodes' Python 3.11 is fine as a
# target): the newest Python found is used; with only 3.11, pip falls back to ansible-core 2.19.
set -eu
venv=${VENV:-/var/cache/provision-bench/venv}
if [ -z "${PYTHON:-}" ]; then
    for candidate in python3.13 python3.12 /root/.pyenv/versions/3.13*/bin/python3 \
                     /root/.pyenv/versions/3.12*/bin/python3 python3; do
        if "$candidate" -c 'import sys, venv' >/dev/null 2>&1; then PYTHON=$candidate; break; fi
    done
fi
"$PYTHON" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "ansible-core${ANSIBLE_CORE:->=2.19}" "pyinfra${PYINFRA:->=3.10,<4}"
"$venv/bin/python" --version
"$venv/bin/ansible-playbook" --version | head -1
"$venv/bin/pyinfra" --version
