# functions.sh is shared by every script (POSIX sh, GNU coreutils,
# util-linux, findutils and btrfs-progs on the replica's host). It runs
# after the prelude, which sets the variables (P, D, S and the operation's)
# and the exit statuses E_* from the table in scripts.go. Messages go to
# standard error; fail exits with one of the E_* statuses.
trap '' PIPE
LC_ALL=C
export LC_ALL
fail() {
	code=$1
	shift
	printf '%s\n' "$*" >&2
	exit "$code"
}
have() { [ -e "$1" ] || [ -L "$1" ]; }
isvol() { btrfs subvolume show "$1" >/dev/null 2>&1; }
# field KEY PATH prints a field of btrfs subvolume show: UUID, Parent UUID, Flags...
field() {
	btrfs subvolume show "$2" 2>/dev/null | awk -v k="$1:" '{ sub(/^[ \t]+/, "") } index($0, k) == 1 { v = substr($0, length(k) + 1); gsub(/^[ \t]+|[ \t]+$/, "", v); print v; exit }'
}
# rmtree PATH deletes a subvolume or a directory, with the subvolumes in it.
rmtree() {
	have "$1" || return 0
	if isvol "$1" && btrfs subvolume delete "$1" >/dev/null 2>&1; then
		return 0
	fi
	find "$1" -mindepth 1 -depth -type d -inum 256 -exec btrfs subvolume delete {} + >/dev/null 2>&1
	if isvol "$1"; then
		btrfs subvolume delete "$1" >/dev/null
	else
		rm -rf -- "$1"
	fi
}
# setup checks the tools and the target's directory, and makes the store.
setup() {
	for t in btrfs flock find awk stat; do
		command -v "$t" >/dev/null 2>&1 || fail $E_NO_TOOL "$t is not installed on the replica's host"
	done
	[ -d "$D" ] || fail $E_NOT_FOUND "the target's directory $D does not exist"
	fs=$(stat -f -c %T "$D") || fail $E_FAILED "cannot read the filesystem type of $D"
	[ "$fs" = btrfs ] || fail $E_NOT_BTRFS "$D is on $fs, not btrfs"
	[ -d "$S" ] || mkdir -m 700 "$S" 2>/dev/null || [ -d "$S" ] || fail $E_FAILED "cannot make the store $S"
}
lock() {
	exec 9>>"$S/lock" || fail $E_FAILED "cannot open the lock $S/lock"
	flock -w 60 9 || fail $E_BUSY "another operation has held $S/lock for over 60s"
}
unlock() { exec 9>&-; }
# target_ok checks that the target is a subvolume that can be renamed.
target_ok() {
	isvol "$P" || fail $E_NOT_VOLUME "the target $P is not a btrfs subvolume"
	if command -v mountpoint >/dev/null 2>&1 && mountpoint -q "$P"; then
		fail $E_NOT_VOLUME "the target $P is a mount point, which cannot be renamed"
	fi
}
# interrupted lists the switches and reverts interrupted between their renames.
interrupted() {
	ops=
	for p in "$S"/prev-*; do
		x=${p##*/prev-}
		if have "$S/next-$x"; then
			ops="$ops, a switch to $x"
		elif have "$S/gone-$x"; then
			ops="$ops, a revert to prev:$x"
		fi
	done
	printf '%s' "${ops#, }"
}
# need_target fails when the target is missing, naming the interrupted operation.
need_target() {
	have "$P" && return 0
	ops=$(interrupted)
	[ -n "$ops" ] || fail $E_INTERRUPTED "the target $P is missing, and no interrupted switch or revert explains it"
	fail $E_INTERRUPTED "the target $P is missing after an interrupted operation ($ops): run it again to finish it"
}
# sweep removes what interrupted checks and receives left: those whose lock nobody holds.
sweep() {
	for l in "$S"/check-*.lock "$S"/part-*.lock; do
		have "$l" || continue
		flock -n "$l" true 2>/dev/null || continue
		rmtree "${l%.lock}" && rm -f -- "$l"
	done
}
