#!/bin/sh
# Installs the Debian packages the tests and the testbed need, and nothing
# when they are all there already. Run as root (make test calls it).
set -eu
# Node 22, the MCP inspector and the TypeScript SDK, from npm: the MCP
# clients nobody on the project wrote that the tests drive (see
# tests/mcpclients/install.sh; quick when they are there already).
"$(dirname "$0")/mcpclients/install.sh"
# iproute2 and curl: the escape tests' test hosts (network namespaces, veth)
# and the HTTP client that goes through a sandbox's allowlist proxy; man-db
# renders sandboxctl's man page in its test; rpm reads the .rpm in the
# packaging test, which makes a user with passwd's useradd; diffutils makes
# the unified diff of a sandbox; openssh is the transport of remote stages
# (the test runs its own sshd on the testbed's loopback); python3 is the
# escape tests' tool inside sandboxes (sockets, io_uring, a memory hog) and
# their test hosts' servers; nodejs runs the node session test;
# libcap2-bin's setcap plants the file
# capabilities a promotion must refuse; e2fsprogs makes the ext4 image
# that holds the testbed root's upper layer; python3-dbus-next is the bus
# library of the Python client (contrib/python), which its test drives;
# nginx-light is the host's service a booted sandbox starts (disabled on
# the host, as the testbed's systemd boots this machine's units);
# bubblewrap is make bench's baseline of a command in fresh namespaces;
# postgresql is the host's service whose data a project adopts (its test
# makes its cluster in the testbed, none on this machine).
pkgs="btrfs-progs e2fsprogs zfs-fuse rsync util-linux mount systemd dbus iproute2 curl bash man-db rpm passwd diffutils openssh-client openssh-server python3 nodejs libcap2-bin python3-dbus-next nginx-light bubblewrap postgresql python3-matplotlib"
need=""
for pkg in $pkgs; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need="$need $pkg"
done
[ -z "$need" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "install-deps: these packages are missing:$need; run as root (sudo make test) to install them" >&2
	exit 1
fi
# zfs-fuse's package would start its daemon on this machine; the testbed
# runs its own, privately. policy-rc.d stops the start (if we made it, it
# goes again at the end), and the service is not enabled for the next boot.
made_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
	chmod 755 /usr/sbin/policy-rc.d
	made_policy=1
fi
trap '[ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d' EXIT
echo "install-deps: apt-get install$need"
apt-get update -qq
case "$need" in
*postgresql*)
	# postgresql-15's postinst would make a cluster (15/main) on this
	# machine: postgresql-common first, whose createcluster.conf then says
	# not to (policy-rc.d keeps any cluster from starting anyway).
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-common >/dev/null
	if ! ls /etc/postgresql/*/*/postgresql.conf >/dev/null 2>&1; then
		pg_conftool /etc/postgresql-common/createcluster.conf set create_main_cluster false
	fi
	;;
esac
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
# Neither may the testbed's private systemd, which boots this machine's own
# units: a test starts the daemons it needs itself.
case "$need" in
*zfs-fuse*) systemctl disable --quiet zfs-fuse.service 2>/dev/null || true ;;
esac
case "$need" in
*openssh-server*) systemctl disable --quiet ssh.service ssh.socket 2>/dev/null || true ;;
esac
case "$need" in
*nginx-light*) systemctl disable --quiet nginx.service 2>/dev/null || true ;;
esac
case "$need" in
*postgresql*) systemctl disable --quiet postgresql.service 2>/dev/null || true ;;
esac
