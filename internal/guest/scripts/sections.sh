# shellcheck shell=sh
# The sections format every structured lever guest script prints (guest.Script parses
# it): each part of the answer is a block
#   <M>begin NAME
#   ...the part's stdout...
#   <M>end NAME STATUS
# and, when the command wrote to stderr, a block NAME.stderr after it. M is "@@lever-"
# and a random nonce, set by the host in the first line of the script (on stdin: no other
# guest user can read it), so a file the run user or an agent wrote that a script prints
# (a certificate, a settings hash) cannot forge a section.
E=$(mktemp) || exit 1
trap 'rm -f "$E" "$E.4" "$E.6"' EXIT
# sec NAME CMD...: CMD's stdout as section NAME, its exit status in the end marker.
sec() {
	n=$1; shift
	echo "${M}begin $n"; "$@" 2>"$E"; rc=$?; echo "${M}end $n $rc"; errsec
}
# secv NAME CMD...: sec, with CMD's stdout also kept in $V (trailing newlines dropped) for
# the script to test, without running CMD twice.
secv() {
	n=$1; shift
	echo "${M}begin $n"; V=$("$@" 2>"$E"); rc=$?; [ -z "$V" ] || printf '%s\n' "$V"; echo "${M}end $n $rc"; errsec
}
# errsec: the stderr block of section $n, when its command wrote to stderr.
errsec() {
	if [ -s "$E" ]; then echo "${M}begin $n.stderr"; cat "$E"; echo "${M}end $n.stderr 0"; fi
}
# put NAME LINE...: the lines given, as section NAME (status 0).
put() {
	n=$1; shift
	echo "${M}begin $n"; printf '%s\n' "$@"; echo "${M}end $n 0"
}
