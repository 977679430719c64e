# switch.sh: P -> prev-NAME, next-NAME -> P, deciding from what it
# finds where an interrupted run of it stopped.
setup
lock
R="$S/recv-$N"
NX="$S/next-$N"
PV="$S/prev-$N"
GN="$S/gone-$N"
[ -d "$R" ] || fail $E_NOT_FOUND "$N has not been received (no $R)"
RS=$(find "$R" -mindepth 1 -maxdepth 1 | head -n 1)
{ [ -n "$RS" ] && isvol "$RS"; } || fail $E_FAILED "$R holds no subvolume"
RU=$(field UUID "$RS")
[ -n "$RU" ] || fail $E_FAILED "cannot read the UUID of $RS"
# next makes next-NAME a writable snapshot of the received one, unless one is there.
next() {
	if have "$NX" && [ "$(field 'Parent UUID' "$NX")" != "$RU" ]; then
		rmtree "$NX" || fail $E_FAILED "cannot remove $NX, which is not a snapshot of $RS"
	fi
	have "$NX" || btrfs subvolume snapshot "$RS" "$NX" >/dev/null || fail $E_FAILED "cannot snapshot $RS to $NX"
}
if ! have "$P"; then
	if have "$PV" && have "$NX"; then
		: # This switch was interrupted between its renames: finish it below.
	else
		# Missing after another interrupted operation: not ours to finish.
		[ -z "$(interrupted)" ] || need_target
		# The first switch (or the target was removed): an empty target,
		# kept as prev.
		btrfs subvolume create "$P" >/dev/null || fail $E_FAILED "cannot create the target subvolume $P"
	fi
fi
if have "$P"; then
	target_ok
	if [ "$(field 'Parent UUID' "$P")" = "$RU" ]; then
		# Switched already.
		rmtree "$NX" || fail $E_FAILED "cannot remove $NX"
		if have "$PV"; then echo "prev:$N"; fi
		exit 0
	fi
	have "$PV" && fail $E_EXISTS "$PV still holds what the target held before an earlier switch to $N: forget prev:$N first"
	next
	mv -T -- "$P" "$PV" || fail $E_FAILED "cannot move $P to $PV"
fi
# The target is missing here: prev-NAME holds what it held. What an
# earlier Revert(prev:NAME) took away is of no more use.
rmtree "$GN" || fail $E_FAILED "cannot remove $GN"
next
mv -T -- "$NX" "$P" || fail $E_FAILED "cannot move $NX to $P"
sync -f "$P" 2>/dev/null || sync
echo "prev:$N"
