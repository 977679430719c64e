#!/bin/bash
# The main job so far, with real output: sandboxd installed as a service
# (in the testbed's private systemd, so nothing of this machine changes),
# three sandboxes of one project trying three fixes side by side, their
# checks compared, the winner's diff, a checkpoint and a rollback.
# `make demo` runs it inside a fresh testbed (bin/testbed run).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# run prints a command as one would type it, then runs it.
run() {
	local line="$" a
	for a in "$@"; do
		case "$a" in *[[:space:]\$\>\|\;]*) line+=" '$a'" ;; *) line+=" $a" ;; esac
	done
	printf '%s\n' "$line"
	"$@"
}

step "install sandboxd as a service, a project on btrfs"
mkdir -p /etc/sandboxd
cat > /etc/sandboxd/sandboxd.toml <<TOML
[storage]
backend = "btrfs"
[storage.btrfs]
root = "/mnt/testbed-btrfs/sandboxd"
[[project]]
name = "shop"
path = "/mnt/testbed-btrfs/project"
TOML
proj=/mnt/testbed-btrfs/project
cat > $proj/price.sh <<'SH'
#!/bin/sh
# Prints the price with VAT of $1 cents: has a bug (adds 2% not 20%).
echo $(( $1 * 102 / 100 ))
SH
cat > $proj/check.sh <<'SH'
#!/bin/sh
# The project's check: 1000 cents with 20% VAT is 1200.
test "$(sh price.sh 1000)" = 1200
SH
cp "$repo/packaging/dbus/org.sandboxd1.conf" /etc/dbus-1/system.d/
busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig >/dev/null
sed "s|ExecStart=/usr/bin/sandboxd|ExecStart=$repo/bin/sandboxd|" "$repo/packaging/systemd/sandboxd.service" > /run/systemd/system/sandboxd.service
systemctl daemon-reload
run systemctl start sandboxd.service
ln -sf "$repo/bin/sandboxctl" /usr/local/bin/sandboxctl

step "three sandboxes of one project, three fixes side by side"
run sandboxctl create --name fix-a shop
run sandboxctl create --name fix-b shop
run sandboxctl create --name fix-c --profile untrusted shop
run sandboxctl exec fix-a -- sed -i s/102/120/ price.sh
run sandboxctl exec fix-b -- sed -i s/102/112/ price.sh
run sandboxctl exec fix-c -- sed -i s/102/121/ price.sh
run sandboxctl list

step "the same check in each"
for s in fix-a fix-b fix-c; do
	if sandboxctl exec "$s" -- sh check.sh; then r=pass; else r=fail; fi
	printf '%-6s %-4s 2000 cents -> %s\n' "$s" "$r" "$(sandboxctl exec "$s" -- sh price.sh 2000)"
done

step "the winner's change, against its base; the project itself is untouched"
run sandboxctl diff fix-a
run cat $proj/price.sh

step "a checkpoint, a mistake, a rollback"
run sandboxctl checkpoint fix-a fixed
run sandboxctl exec fix-a -- sh -c 'echo broken > price.sh'
run sandboxctl exec fix-a -- sh check.sh || echo "(check fails: exit $?)"
run sandboxctl rollback fix-a fixed
run sandboxctl exec fix-a -- sh check.sh && echo "(check passes again)"

step "the limits hold: untrusted has 512 MiB"
run sandboxctl status fix-c
run sandboxctl exec fix-c -- tail /dev/zero || echo "(exit $?)"

step "clean up"
run sandboxctl destroy fix-a fix-b fix-c
run systemctl stop sandboxd.service
echo
echo "Promotion of the winner to the project comes with the promotion issue."
