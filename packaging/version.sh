#!/bin/sh
# The packages' version, from git describe: v0.1.0-12-gabc1234-dirty is
# 0.1.0+git12.abc1234.dirty (after 0.1.0, before 0.1.1); without a tag,
# 0.0.0+git.abc1234.
v=$(git describe --tags --always --dirty 2>/dev/null || echo unknown)
case "$v" in
v[0-9]*) echo "$v" | sed -E 's/^v//; s/-([0-9]+)-g/+git\1./; s/-dirty$/.dirty/' ;;
*) echo "0.0.0+git.$v" | sed 's/-dirty$/.dirty/' ;;
esac
