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
	rm -rf /var/lib/sandboxd /var/log/sandboxd /etc/sandboxd /run/sandboxd
fi
exit 0
