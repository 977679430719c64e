#!/bin/bash
# The main job, with real output: sandboxd installed as a service on its
# embedded pool, a small project, three sandboxes of it trying three fixes
# side by side, their checks compared, the winner's diff, a checkpoint and
# a rollback, the winner promoted to the project through its check, a
# server in a sandbox reached from the host, a Python session, a memory
# limit, and (in the testbed) the host's own nginx: its site adopted where
# it lives, its config fixed in a booted sandbox and promoted; an agent
# user's own project adopted from its home, a fix tried and promoted as
# that user; then it cleans up after itself.
#
# `make demo` runs it inside a fresh testbed (bin/testbed run), where
# nothing of this machine changes; on a machine whose PID 1 is systemd and
# that has no sandboxd of its own, it runs under that systemd, with its
# state under /run/sandboxd-demo, and removes all of it at the end.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# run prints a command as one would type it, then runs it.
run() {
	local line="$" a
	for a in "$@"; do
		case "$a" in *[[:space:]\$\>\|\;\'\(]*) line+=" '${a//\'/\'\\\'\'}'" ;; *) line+=" $a" ;; esac
	done
	printf '%s\n' "$line"
	"$@"
}

# as_agent runs a command as the demo's agent user, with its groups (the
# bus judges membership of group sandboxd by them).
as_agent() { (cd / && setpriv --reuid="$agent" --regid="$agent" --init-groups env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="/home/$agent" "$@"); }

demo=/run/sandboxd-demo
conf=$demo/sandboxd.toml
pool=$demo/pool
proj=$pool/projects/shop

cleanup() {
	set +e
	sandboxctl destroy --quiet $(sandboxctl list --quiet 2>/dev/null) >/dev/null 2>&1
	sandboxctl project remove shop >/dev/null 2>&1
	if [ -n "$site_made" ]; then
		systemctl stop nginx.service
		sandboxctl project release site >/dev/null 2>&1
		rm -rf "$site" /etc/nginx/conf.d/demo-site.conf
		[ ! -e /etc/nginx/default.aside ] || mv /etc/nginx/default.aside /etc/nginx/sites-enabled/default
	fi
	[ -z "$agent_made" ] || as_agent sandboxctl project release calc >/dev/null 2>&1
	systemctl stop sandboxd.service 2>/dev/null
	[ -z "$agent_made" ] || userdel -r "$agent" >/dev/null 2>&1
	[ -z "$group_made" ] || groupdel sandboxd >/dev/null 2>&1
	btrfs subvolume delete "$proj" >/dev/null 2>&1
	umount -R "$pool" 2>/dev/null
	rm -rf "$demo" /run/systemd/system/sandboxd.service /usr/local/bin/sandboxctl
	[ -z "$made_policy" ] || rm -f /etc/dbus-1/system.d/org.sandboxd1.conf
	systemctl daemon-reload 2>/dev/null
}

step "install sandboxd as a service, on its embedded pool, with a stage"
if systemctl cat sandboxd.service >/dev/null 2>&1 && [ ! -e /run/systemd/system/sandboxd.service ]; then
	echo "demo: this machine has a sandboxd.service of its own; the demo would replace it. Run it in the testbed: bin/testbed run -- $0" >&2
	exit 1
fi
made_policy=""
agent=sandboxd-demo-agent
agent_made=""
group_made=""
site=/srv/demo-site
site_made=""
# Sandboxes in user namespaces over the root's layers: the testbed's root
# is an overlay, whose layers are listed; elsewhere the root itself.
layers='["/"]'
[ ! -d /run/testbed/layers ] || layers='["/run/testbed/layers/upper", "/run/testbed/layers/lower"]'
trap cleanup EXIT
mkdir -p "$demo"
cat > "$conf" <<TOML
[daemon]
state_dir = "$demo/state"
audit_log = "$demo/audit.log"
[storage]
backend = "embedded"
[storage.embedded]
image = "$demo/pool.img"
size = "2GiB"
mountpoint = "$pool"
[sandbox]
userns = "auto"
root_layers = $layers
# Promotion to the project passes only if the project's own check does.
[[stage]]
name = "project"
target = "project"
checks = ["sh check.sh"]
TOML
run cat "$conf"
made_policy=""
if [ ! -e /etc/dbus-1/system.d/org.sandboxd1.conf ]; then
	cp "$repo/packaging/dbus/org.sandboxd1.conf" /etc/dbus-1/system.d/
	made_policy=1
fi
# The members' group (the package makes it): the bus and the daemon
# read group names when they load their policy and configuration.
if ! getent group sandboxd >/dev/null; then
	groupadd --system sandboxd
	group_made=1
fi
busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig >/dev/null
sed "s|ExecStart=/usr/bin/sandboxd|ExecStart=$repo/bin/sandboxd --config $conf|" "$repo/packaging/systemd/sandboxd.service" > /run/systemd/system/sandboxd.service
systemctl daemon-reload
run systemctl start sandboxd.service
ln -sf "$repo/bin/sandboxctl" /usr/local/bin/sandboxctl

step "a small project in the pool: a price with VAT, with a bug"
mkdir -p "$pool/projects"
btrfs subvolume create "$proj" >/dev/null
cat > "$proj/price.sh" <<'SH'
#!/bin/sh
# Prints the price with VAT of $1 cents: has a bug (adds 2% not 20%).
echo $(( $1 * 102 / 100 ))
SH
cat > "$proj/check.sh" <<'SH'
#!/bin/sh
# The project's check: 1000 cents with 20% VAT is 1200.
got=$(sh price.sh 1000)
echo "1000 cents with VAT: $got"
test "$got" = 1200
SH
run sandboxctl project add shop "$proj"

step "three sandboxes of it try three fixes side by side, the same check in each"
run sandboxctl try shop --name fix --check 'sh check.sh' \
	--variant 'sed -i s/102/112/ price.sh' \
	--variant 'sed -i s/102/120/ price.sh && echo "VAT is 20%" > NOTES' \
	--variant 'sed -i s/102/1200/ price.sh'

step "the winner's change against its base: the list, then the text"
run sandboxctl diff fix-2
run sandboxctl diff --text fix-2

step "a checkpoint, a mistake, a rollback"
run sandboxctl checkpoint fix-2 fixed
run sandboxctl exec fix-2 -- sh -c 'echo broken > price.sh'
run sandboxctl exec fix-2 -- sh check.sh || echo "(the check fails: exit $?)"
run sandboxctl rollback fix-2 fixed
run sandboxctl exec fix-2 -- sh check.sh

step "promote the winner: checked in a sandbox of the result, then kept"
run cat "$proj/price.sh"
run sandboxctl promote fix-2
run cat "$proj/price.sh" "$proj/NOTES"
run sandboxctl promotions

step "a server in the sandbox, in the background, reached from the host"
run sandboxctl run --detach fix-2 -- python3 -m http.server 8000 --bind 127.0.0.1
sock=$(sandboxctl port fix-2 8000)
echo "\$ sandboxctl port fix-2 8000"
echo "$sock"
for _ in $(seq 50); do curl -sf --unix-socket "$sock" http://sandbox/price.sh >/dev/null 2>&1 && break; sleep 0.1; done
run curl -s --unix-socket "$sock" http://sandbox/price.sh
run sandboxctl ps fix-2
run sandboxctl logs fix-2 "$(sandboxctl ps --quiet fix-2 | tail -1)"

step "fork the sandbox where it stands, two ways; stop one and start it again"
run sandboxctl exec fix-2 -- sh -c 'echo "set up once, at $(date +%T)" > setup.log'
run sandboxctl fork fix-2 --count 2 --name fix-2a --name fix-2b
run sandboxctl exec fix-2b -- sh -c 'cat setup.log; echo "b only" > b.txt'
run sandboxctl exec fix-2a -- sh -c 'cat setup.log; ls b.txt' || echo "(exit $?: b.txt is fix-2b's alone)"
run sandboxctl stop fix-2a
run sandboxctl exec fix-2a -- true || echo "(exit $?)"
run sandboxctl start fix-2a
run sandboxctl exec fix-2a -- cat setup.log
run sandboxctl destroy fix-2a fix-2b

step "a Python session: its variables stay between inputs"
printf 'price = 1000\nprint(price * 1.2)\n' | run sandboxctl repl fix-2 python3

step "the limits hold: untrusted has 512 MiB"
run sandboxctl create --name hog --profile untrusted shop
run sandboxctl exec hog -- tail /dev/zero || echo "(exit $?)"

step "an agent's own project: adopted from its home as that user"
useradd --create-home --groups sandboxd "$agent"
agent_made=1
calc=/home/$agent/calc
as_agent mkdir "$calc"
as_agent sh -c "cat > $calc/calc.py" <<'PY'
def average(xs):
    return sum(xs) / (len(xs) + 1)
PY
as_agent sh -c "cat > $calc/test_calc.py" <<'PY'
from calc import average
assert average([2, 4, 6]) == 4, average([2, 4, 6])
print("ok")
PY
as_agent sh -c "printf '__pycache__/\n' > $calc/.gitignore; printf 'python3 test_calc.py\n' > $calc/check.sh"
echo "\$ id"; as_agent id
run as_agent sandboxctl project adopt calc "$calc"
run as_agent sandboxctl project list

step "three fixes tried as the agent, the winner promoted to its home"
run as_agent sandboxctl try calc --name avg --check 'python3 test_calc.py' \
	--variant "sed -i 's/len(xs) + 1/len(xs) - 1/' calc.py" \
	--variant "sed -i 's/len(xs) + 1/len(xs)/' calc.py" \
	--variant "sed -i 's/sum(xs)/max(xs)/' calc.py"
run as_agent sandboxctl diff avg-2
run as_agent sandboxctl promote avg-2
run ls -la "$calc"
run cat "$calc/calc.py"
run as_agent sandboxctl destroy avg-2
run as_agent sandboxctl project release calc
run ls -la "$calc"

if [ -d /run/testbed/layers ] && command -v nginx >/dev/null; then
step "the host's own nginx serves a site whose config has a bug"
mkdir -p "$site/www"
site_made=1
echo '<h1>the shop</h1>' > "$site/www/index.html"
cat > "$site/site.conf" <<'CONF'
server {
	listen 127.0.0.1:8081;
	root /srv/demo-site/html;
}
CONF
cat > "$site/check.sh" <<'SH'
#!/bin/sh
# The site's check: nginx takes the config, and the root it names exists.
mkdir -p /var/log/nginx && nginx -t -q || exit 1
root=$(sed -n 's/^[[:space:]]*root \(.*\);/\1/p' site.conf)
test -d "$root" || { echo "site.conf's root $root does not exist"; exit 1; }
SH
echo "include $site/site.conf;" > /etc/nginx/conf.d/demo-site.conf
[ ! -e /etc/nginx/sites-enabled/default ] || mv /etc/nginx/sites-enabled/default /etc/nginx/default.aside
run systemctl start nginx.service
run curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:8081/

step "adopt the site where it lives; a booted sandbox runs the same nginx on its copy"
run sandboxctl project adopt site "$site"
run sandboxctl create --name web --boot site
for _ in $(seq 100); do
	case "$(sandboxctl exec web -- systemctl is-system-running 2>/dev/null)" in running | degraded) break ;; esac
	sleep 0.05
done
run sandboxctl exec --root web -- systemctl start nginx
addr=$(sandboxctl port --tcp web 8081)
echo "\$ sandboxctl port --tcp web 8081"
echo "$addr"
run curl -s -o /dev/null -w '%{http_code}\n' "http://$addr/"

step "fix the config in the sandbox, reload its nginx, see it work"
run sandboxctl exec --root web -- sh -c "sed -i 's#/srv/demo-site/html#/srv/demo-site/www#' $site/site.conf && systemctl reload nginx"
for _ in $(seq 50); do curl -sf "http://$addr/" >/dev/null && break; sleep 0.1; done
run curl -s "http://$addr/"
run sandboxctl status web

step "promote the fix through the site's check; the host's nginx picks it up"
run sandboxctl promote web
run systemctl reload nginx.service
for _ in $(seq 50); do curl -sf http://127.0.0.1:8081/ >/dev/null && break; sleep 0.1; done
run curl -s http://127.0.0.1:8081/
run sandboxctl destroy web
fi

step "clean up"
if [ -n "$site_made" ]; then
	run systemctl stop nginx.service
	run sandboxctl project release site
fi
run sandboxctl destroy fix-2 hog
run sandboxctl project remove shop
run systemctl stop sandboxd.service
