# forget.sh defines forget_recv and forget_prev, which the lines Forget
# appends call.
[ -d "$S" ] || exit 0
lock
sweep
if ! have "$P"; then
	for p in "$S"/prev-*; do have "$p" && need_target; done
fi
forget_recv() {
	for x in "$S/recv-$1" "$S/next-$1" "$S/gone-$1" "$S/part-$1~"*; do
		rmtree "$x" || fail $E_FAILED "cannot remove $x"
	done
}
forget_prev() {
	for x in "$S/prev-$1" "$S/gone-$1"; do
		rmtree "$x" || fail $E_FAILED "cannot remove $x"
	done
}
