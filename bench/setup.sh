#!/bin/sh
# Installs the peers `make bench` compares with, outside the repository:
# Debian's bubblewrap (when root and missing) and the npm package pyodide in
# $FUMEHOOD_CACHE_DIR/bench (default: ~/.cache/fumehood/bench). Prints the
# Pyodide directory on its last line.
set -eu
PYODIDE_VERSION=0.27.7 # CPython 3.12, the guest's version
# The tarball's npm integrity; npm checks the download against it, we check npm.
PYODIDE_INTEGRITY=sha512-RUSVJlhQdfWfgO9hVHCiXoG+nVZQRS5D9FzgpLJ/VcgGBLSAKoPL8kTiOikxbHQm1kRISeWUBdulEgO26qpSRA==

if ! command -v bwrap >/dev/null 2>&1; then
	if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >&2
	else
		echo "note: bubblewrap (bwrap) is not installed: its row is skipped" >&2
	fi
fi

cache="${FUMEHOOD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fumehood}/bench"
dir="$cache/pyodide-$PYODIDE_VERSION"
if [ ! -f "$dir/node_modules/pyodide/pyodide.js" ]; then
	if command -v npm >/dev/null 2>&1; then
		mkdir -p "$dir"
		# npm checks the tarball against the registry's integrity hash.
		npm install --silent --no-audit --no-fund --no-save --prefix "$dir" "pyodide@$PYODIDE_VERSION" >&2
	else
		echo "note: npm is not installed: the Pyodide rows are skipped" >&2
	fi
fi
if [ -f "$dir/node_modules/pyodide/pyodide.js" ] &&
	! grep -q "\"integrity\": \"$PYODIDE_INTEGRITY\"" "$dir/node_modules/.package-lock.json"; then
	echo "error: $dir does not hold pyodide@$PYODIDE_VERSION with integrity $PYODIDE_INTEGRITY" >&2
	exit 1
fi
if [ -f "$dir/node_modules/pyodide/pyodide.js" ] && command -v node >/dev/null 2>&1; then
	echo "$dir/node_modules/pyodide"
else
	echo ""
fi
