# has.sh prints yes if received snapshot N is kept, no if not.
if [ -d "$S/recv-$N" ]; then echo yes; else echo no; fi
