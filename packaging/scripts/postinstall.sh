#!/bin/sh
# After an install or an upgrade (deb: "configure"; rpm: 1 or 2): the
# group, the state and log directories, and systemd and D-Bus reading the
# new unit, policy and activation file. An upgrade restarts a running
# daemon; its sandboxes live in their own scopes and are adopted again.
# A first install enables the daemon for boot (not started now: the
# first D-Bus call starts it), so that the sandboxes it keeps run again
# after the host's reboot, their declared processes with them; an
# admin's disable holds through upgrades.
set -e
systemd-sysusers sandboxd.conf >/dev/null 2>&1 || getent group sandboxd >/dev/null || groupadd --system sandboxd
systemd-tmpfiles --create sandboxd.conf >/dev/null 2>&1 || true
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig >/dev/null 2>&1 || true
	systemctl try-restart sandboxd.service || true
	# Never enabled nor started by the package; restarted on an upgrade
	# if it runs.
	systemctl try-restart sandboxd-kubelet.service || true
fi
case "$1" in
configure) [ -n "$2" ] || first=yes ;; # deb: no version before
1) first=yes ;;                         # rpm: the first install
esac
if [ -n "${first:-}" ]; then
	systemctl enable sandboxd.service >/dev/null 2>&1 || true
fi
exit 0
