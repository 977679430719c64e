#!/bin/sh
# After an install or an upgrade (deb: "configure"; rpm: 1 or 2): the
# group, the state and log directories, and systemd and D-Bus reading the
# new unit, policy and activation file. An upgrade restarts a running
# daemon; its sandboxes live in their own scopes and are adopted again.
# The daemon is not enabled: the first D-Bus call starts it (activation).
set -e
systemd-sysusers sandboxd.conf >/dev/null 2>&1 || getent group sandboxd >/dev/null || groupadd --system sandboxd
systemd-tmpfiles --create sandboxd.conf >/dev/null 2>&1 || true
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig >/dev/null 2>&1 || true
	systemctl try-restart sandboxd.service || true
fi
exit 0
