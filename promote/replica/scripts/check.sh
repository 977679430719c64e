# check.sh runs CMD in check-ID, a writable snapshot of P, in a session
# of its own. A watcher reads standard input and kills that session when
# it ends (ssh or sandboxd went away); the script kills the watcher once
# the check is over, so the watcher never outlives the check's process
# group. The check's status is the last line on standard error.
setup
command -v setsid >/dev/null 2>&1 || fail $E_NO_TOOL "setsid is not installed on the replica's host"
lock
need_target
C="$S/check-$ID"
exec 7>"$C.lock" || fail $E_FAILED "cannot make $C.lock"
flock -n 7 || fail $E_FAILED "cannot lock $C.lock"
cpid=
trap 'rmtree "$C" || echo "cannot remove $C" >&2; rm -f -- "$C.lock"' EXIT
trap '[ -z "$cpid" ] || kill -KILL -"$cpid" 2>/dev/null; exit 143' HUP INT TERM
btrfs subvolume snapshot "$P" "$C" >/dev/null || fail $E_FAILED "cannot snapshot $P to $C"
unlock
exec 8<&0
(cd "$C" && exec setsid -w sh -c "$CMD") </dev/null 8<&- 7>&- 2>&1 &
cpid=$!
setsid sh -c 'cat >/dev/null; kill -KILL -"$1" 2>/dev/null' watcher "$cpid" <&8 7>&- >/dev/null 2>&1 &
wpid=$!
exec 8<&-
wait "$cpid"
status=$?
kill -KILL -"$wpid" 2>/dev/null
echo "sandboxd-check-status $status" >&2
