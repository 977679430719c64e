#!/bin/sh
# After a removal: systemd and D-Bus forget the unit and the policy. A
# purge (deb only) also ends every sandbox and deletes the state (records,
# the embedded pool), the audit log and the configuration.
set -e
case "$1" in
remove | 0 | purge)
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
		busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig >/dev/null 2>&1 || true
	fi
	;;
esac
if [ "$1" = purge ]; then
	if [ -d /run/systemd/system ]; then
		systemctl stop 'sandbox-*.scope' >/dev/null 2>&1 || true
	fi
	# The embedded pool's image is loop-mounted; its loop device frees
	# itself when the mount goes.
	if mountpoint -q /var/lib/sandboxd/pool 2>/dev/null; then
		umount /var/lib/sandboxd/pool || umount -l /var/lib/sandboxd/pool || true
	fi
	# The pool's boot mount, written by the daemon once a mount unit
	# binds an adopted directory's volume: removed if it is the daemon's.
	unit=/etc/systemd/system/var-lib-sandboxd-pool.mount
	if grep -q '^Description=sandboxd pool at ' "$unit" 2>/dev/null; then
		rm -f "$unit" /etc/systemd/system/local-fs.target.wants/var-lib-sandboxd-pool.mount
		[ ! -d /run/systemd/system ] || systemctl daemon-reload || true
	fi
	rm -rf /var/lib/sandboxd /var/log/sandboxd /etc/sandboxd /run/sandboxd
	# Enabled for boot by the first install (a removal keeps it, as an
	# admin's disable is kept through upgrades).
	rm -f /etc/systemd/system/multi-user.target.wants/sandboxd.service
	# An admin's enable of the kubelet goes with the purge too.
	rm -f /etc/systemd/system/multi-user.target.wants/sandboxd-kubelet.service
fi
if [ "$1" = 0 ]; then # rpm: erased (no purge there)
	rm -f /etc/systemd/system/multi-user.target.wants/sandboxd.service
	# An admin's enable of the kubelet goes with the purge too.
	rm -f /etc/systemd/system/multi-user.target.wants/sandboxd-kubelet.service
fi
exit 0
