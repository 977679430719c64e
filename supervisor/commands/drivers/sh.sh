# sandboxd's session driver for sh: reads inputs, each ended by a line
# holding only the session's token ($1), evaluates each in this one shell
# (its variables and functions stay), and answers "<length> <status>\n"
# and the output on the stdout it was started with. The input's output
# goes to a file of its own; its stdin is /dev/null. The driver's own
# names start with __sbx_, out of the inputs' way.
__sbx_end=$1
__sbx_cap=$2
exec 3>&1 4<&0 </dev/null
__sbx_out=$(mktemp) || exit 1
trap 'rm -f "$__sbx_out"' EXIT
while :; do
	__sbx_code=
	__sbx_got=
	while IFS= read -r __sbx_line <&4; do
		if [ "$__sbx_line" = "$__sbx_end" ]; then __sbx_got=1; break; fi
		__sbx_code="$__sbx_code$__sbx_line
"
	done
	[ -n "$__sbx_got" ] || exit 0
	eval "$__sbx_code" >"$__sbx_out" 2>&1 </dev/null
	__sbx_st=$?
	__sbx_n=$(wc -c <"$__sbx_out")
	[ "$__sbx_n" -gt "$__sbx_cap" ] && __sbx_n=$__sbx_cap
	printf '%s %s\n' "$__sbx_n" "$__sbx_st" >&3
	head -c "$__sbx_n" "$__sbx_out" >&3
done
