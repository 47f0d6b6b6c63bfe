#!/usr/bin/env bash
# The OpenAI-compatible server end to end (tests/server/test_server.py), in a virtual environment
# that has the pinned openai client.
# usage: run_server_tests.sh DELTAINFER_BINARY MODEL_DIR VENV_DIR
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 DELTAINFER_BINARY MODEL_DIR VENV_DIR" >&2
  exit 2
fi
bin=$1
model=$2
venv=$3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# An existing environment is reused as it is: no registry traffic on repeated runs.
if ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$root/tests/server/requirements.txt"
fi
exec "$venv/bin/python" "$root/tests/server/test_server.py" "$bin" "$model"
