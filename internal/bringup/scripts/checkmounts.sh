# shellcheck shell=sh
# Fails when a bind-mount source inside the tree is missing (exit 3) or reaches its real
# path through a symlink (exit 4), naming it on stderr. $1 is the tree; the rest are paths
# below it.
t=$(realpath -e -- "$1") || { echo "tree $1 is missing" >&2; exit 3; }
shift
for rel do
	r=$(realpath -e -- "$t/$rel") || { echo "mount source $t/$rel is missing" >&2; exit 3; }
	[ "$r" = "$t/$rel" ] || { echo "mount source $t/$rel resolves to $r through a symlink" >&2; exit 4; }
done
