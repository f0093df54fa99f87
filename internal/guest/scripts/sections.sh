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
	if [ -s "$E" ]; then echo "${M}begin $n.stderr"; rd "$E"; echo "${M}end $n.stderr 0"; fi
}
# rd FILE: a small text file's lines, as cat prints them (a last line without its newline
# gets one), read by the shell itself: under emulation every process costs 0.1-0.2 s, and
# a warm bring-up's one guest call reads several such files. Fails (status 1, a message
# on stderr) when FILE cannot be opened, as cat does.
rd() {
	{ while IFS= read -r l || [ -n "$l" ]; do printf '%s\n' "$l"; done; } 2>/dev/null <"$1" || { echo "rd: cannot read $1" >&2; return 1; }
}
# putrc NAME RC TEXT: TEXT (nothing when empty) as section NAME, with exit status RC.
putrc() {
	echo "${M}begin $1"; [ -z "$3" ] || printf '%s\n' "$3"; echo "${M}end $1 $2"
}
# put NAME LINE...: the lines given, as section NAME (status 0).
put() {
	n=$1; shift
	echo "${M}begin $n"; printf '%s\n' "$@"; echo "${M}end $n 0"
}
