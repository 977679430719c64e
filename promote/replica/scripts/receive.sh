# receive.sh receives the stream on its standard input into
# part-NAME~ID, then keeps it as recv-NAME only if the next line of its
# standard input is "commit" and the result is one read-only received
# subvolume.
setup
lock
sweep
have "$S/recv-$N" && fail $E_EXISTS "$N is received already"
T="$S/part-$N~$ID"
exec 7>"$T.lock" || fail $E_FAILED "cannot make $T.lock"
flock -n 7 || fail $E_FAILED "cannot lock $T.lock"
mkdir "$T" || fail $E_FAILED "cannot make $T"
unlock
trap 'rmtree "$T"; rm -f -- "$T.lock"' EXIT
trap 'exit 143' HUP INT TERM
btrfs receive -q -e "$T" >/dev/null || fail $E_FAILED "btrfs receive of $N failed; nothing of it was kept"
IFS= read -r word || word=
[ "$word" = commit ] || fail $E_ABORTED "the sender did not finish the stream of $N; nothing of it was kept"
n=$(find "$T" -mindepth 1 -maxdepth 1 | wc -l)
sub=$(find "$T" -mindepth 1 -maxdepth 1 | head -n 1)
{ [ "$n" -eq 1 ] && isvol "$sub"; } || fail $E_CORRUPT "the stream of $N made $n entries, not one subvolume"
case $(field Flags "$sub") in
*readonly*) ;;
*) fail $E_CORRUPT "the subvolume received for $N is not read-only: its stream did not end" ;;
esac
case $(field "Received UUID" "$sub") in
'' | -) fail $E_CORRUPT "the subvolume received for $N has no received UUID" ;;
esac
lock
have "$S/recv-$N" && fail $E_EXISTS "$N is received already"
mv -T -- "$T" "$S/recv-$N" || fail $E_FAILED "cannot move $T to $S/recv-$N"
trap - EXIT
rm -f -- "$T.lock"
sync -f "$S" 2>/dev/null || sync
