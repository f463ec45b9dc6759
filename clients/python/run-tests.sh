#!/usr/bin/env bash
# Runs the whole test suite of the Python client: installs the package into
# a throw-away venv and runs pytest on the installed copy against the real
# daemon ($SPILLWAY_BIN). Exit 0 only if every test passes; 2 if the
# toolchain is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if ! command -v python3 >/dev/null 2>&1; then
    echo "missing toolchain: python3 (>= 3.9) with venv and pip (apt-get install python3 python3-venv python3-pip)"
    exit 2
fi
if ! python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)'; then
    echo "missing toolchain: python3 >= 3.9 (found $(python3 --version 2>&1))"
    exit 2
fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1 && ! python3 -m pip --version >/dev/null 2>&1; then
    echo "missing toolchain: python3 venv/pip (apt-get install python3-venv python3-pip)"
    exit 2
fi

if [[ -z "${SPILLWAY_BIN:-}" ]]; then
    echo "SPILLWAY_BIN is not set: set it to the spillway daemon binary (e.g. target/release/spillway)" >&2
    exit 1
fi
if [[ ! -x "$SPILLWAY_BIN" ]]; then
    echo "SPILLWAY_BIN=$SPILLWAY_BIN is not an executable file" >&2
    exit 1
fi
export SPILLWAY_BIN

if ! python3 -m pytest --version >/dev/null 2>&1; then
    python3 -m pip install --quiet --disable-pip-version-check pytest
fi

venv="$(mktemp -d "${TMPDIR:-/tmp}/spillway-py-venv.XXXXXX")"
trap 'rm -rf "$venv"' EXIT
# --system-site-packages: the venv sees the pytest found or installed above.
python3 -m venv --system-site-packages "$venv"
py="$venv/bin/python"
# No build isolation when setuptools >= 61 and wheel are already there (no
# download, fast);
# else pip fetches the build backend as usual.
if "$py" -c 'import setuptools, wheel, sys; sys.exit(0 if int(setuptools.__version__.split(".")[0]) >= 61 else 1)' >/dev/null 2>&1; then
    build_flags=(--no-build-isolation)
else
    build_flags=()
fi
# Install from a copy: setuptools writes build/ and *.egg-info next to the
# sources it builds, and the work tree should stay clean.
mkdir "$venv/src"
cp -R "$here/pyproject.toml" "$here/README.md" "$here/src" "$venv/src/"
# The wheel the README tells users to build, then installed as they would
# on a host without the source tree.
"$py" -m pip wheel --quiet --disable-pip-version-check --no-deps "${build_flags[@]}" \
    --wheel-dir "$venv/dist" "$venv/src"
wheels=("$venv"/dist/spillway_client-*-py3-none-any.whl)
if [[ ! -f "${wheels[0]}" ]]; then
    echo "pip wheel made no spillway_client-*-py3-none-any.whl in $venv/dist: $(ls "$venv/dist")" >&2
    exit 1
fi
"$py" -m pip install --quiet --disable-pip-version-check --no-deps "${wheels[0]}"

# Run from the venv folder so that the source tree is not on sys.path: the
# tests import the installed package (test_the_installed_package_is_tested).
cd "$venv"
SPILLWAY_PY_INSTALLED=1 nice -n 10 "$py" -m pytest -q -p no:cacheprovider --rootdir "$here" -c /dev/null "$here/tests" "$@"
