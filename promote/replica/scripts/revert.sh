# revert.sh: P -> gone-NAME, prev-NAME -> P, deciding from what it
# finds where an interrupted run of it stopped.
setup
lock
PV="$S/prev-$N"
GN="$S/gone-$N"
if have "$P"; then
	if have "$PV"; then
		target_ok
		rmtree "$GN" || fail $E_FAILED "cannot remove $GN"
		mv -T -- "$P" "$GN" || fail $E_FAILED "cannot move $P to $GN"
	elif have "$GN"; then
		exit 0 # reverted already
	else
		fail $E_NOT_FOUND "prev:$N is not kept (no $PV)"
	fi
fi
# The target is missing here: finish this revert, or undo an interrupted
# switch to the same name, or put prev back where nothing explains why the
# target is missing; another interrupted operation is for it to finish.
{ have "$PV" && { have "$GN" || have "$S/next-$N" || [ -z "$(interrupted)" ]; }; } || need_target
mv -T -- "$PV" "$P" || fail $E_FAILED "cannot move $PV to $P"
sync -f "$P" 2>/dev/null || sync
