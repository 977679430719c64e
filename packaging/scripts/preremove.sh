#!/bin/sh
# Before a removal (deb: "remove"; rpm: 0), not an upgrade: stop the
# daemon. Sandboxes keep running in their scopes, and their state stays:
# a reinstall adopts them; a purge ends them.
set -e
case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl stop sandboxd-kubelet.service >/dev/null 2>&1 || true
		systemctl stop sandboxd.service >/dev/null 2>&1 || true
	fi
	;;
esac
exit 0
