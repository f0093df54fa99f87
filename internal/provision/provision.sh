#!/bin/sh
# lever guest provisioning. Run as root in the guest with its parameters in the environment:
#   LEVER_RUN_USER   the unprivileged user that owns rootless podman and lev
#   LEVER_PACKAGES   Debian packages the jail needs (space separated)
#   LEVER_STAMP      the root-owned stamp file this script writes last
#   LEVER_HASH       the hash of this script and its parameters, written into the stamp
#   LEVER_SYSCTL_FILE  where to persist the sysctls (empty: set them for this boot only)
#   LEVER_SKIP_INSTALL 1 when the stamp matched: only the per-boot steps run
# Every step is idempotent and, when it changed something, says what in a section of its
# own (change.1, change.2, ...: guest.Script's sections format, whose prelude comes first);
# the run user's uid and the OCI runtime close the answer.
set -eu
# Under emulation (qemu TCG) every process costs 0.05-0.2 s and this runs in every cold
# bring-up: the checks below use the shell's own read, case and IFS splitting where a
# tr, cut, cat or grep would be a process each; only what changes something runs a tool.
nchanges=0 # not n or rc: the prelude's sec and put use those
changed() { nchanges=$((nchanges+1)); put "change.$nchanges" "$1"; }
U=$LEVER_RUN_USER

# 1. packages (the only slow step; skipped when the stamp matches this script and boot)
if [ "${LEVER_SKIP_INSTALL:-0}" != 1 ]; then
	missing=""
	# One dpkg-query for every name, alternatives split on | by the shell; unknown names
	# print nothing. $installed is " name name ... ".
	set -f
	# shellcheck disable=SC2086 # the names are words, split on blanks and |
	listing=$(IFS='| '; dpkg-query -W -f='${Package} ${Status}\n' $LEVER_PACKAGES 2>/dev/null) || true
	installed=" "
	while read -r name st1 st2 st3; do
		[ "$st1 $st2 $st3" = "install ok installed" ] && installed="$installed$name "
	done <<LEVER_EOF
$listing
LEVER_EOF
	for p in $LEVER_PACKAGES; do
		# alternatives (a|b): any one installed is enough, else install the first
		ok=""
		IFS='|'
		for a in $p; do
			case "$installed" in *" $a "*) ok=1 ;; esac
		done
		unset IFS
		[ -n "$ok" ] || missing="$missing ${p%%|*}"
	done
	set +f
	if [ -n "$missing" ]; then
		changed "installing$missing"
		if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >/tmp/lever-apt.log 2>&1; then
			echo "installing packages$missing failed (see /tmp/lever-apt.log in the guest):" >&2
			tail -5 /tmp/lever-apt.log >&2
			exit 3
		fi
	fi
fi

# 2. the run user, with subordinate ids for rootless podman's user namespace
if ! uid=$(id -u "$U" 2>/dev/null); then
	useradd --create-home --shell /bin/sh --user-group --comment "lever run user" "$U"
	changed "created run user $U"
	uid=$(id -u "$U")
fi
pw=$(getent passwd "$U")
home=${pw#*:*:*:*:*:}; home=${home%%:*}
# has_ids FILE: FILE names the run user (by name or uid) in its first field
has_ids() {
	while IFS=: read -r who _ || [ -n "$who" ]; do
		[ "$who" = "$U" ] || [ "$who" = "$uid" ] && return 0
	done <"$1"
	return 1
}
for f in /etc/subuid /etc/subgid; do
	[ -e "$f" ] || : >"$f"
	if ! has_ids "$f"; then
		# the first free 65536-id range at or above 100000, past every existing range
		start=$(awk -F: 'BEGIN{m=100000} {e=$2+$3; if (e>m) m=e} END{print m}' "$f")
		# a last line without its newline must not run into the new one
		if [ -s "$f" ] && [ -n "$(tail -c 1 "$f")" ]; then echo >>"$f"; fi
		echo "$U:$start:65536" >>"$f"
		changed "$f range $start+65536 for $U"
	fi
done

# 3. lingering, so the run user's podman outlives any login; without systemd (a network
# namespace on a plain host) the runtime directory is made by hand, each boot.
rt=/run/user/$uid
if [ -d /run/systemd/system ] && command -v loginctl >/dev/null 2>&1; then
	if [ ! -e "/var/lib/systemd/linger/$U" ]; then
		loginctl enable-linger "$U"
		changed "lingering enabled for $U"
	fi
	i=0; while [ ! -d "$rt" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
fi
if [ ! -d "$rt" ]; then
	mkdir -p "$rt"
	chown "$U:" "$rt"
	chmod 0700 "$rt"
	changed "runtime dir $rt"
fi

# 4. the sysctls rootless podman and pasta need: unprivileged user namespaces on
setsys() { # key value
	f=/proc/sys
	IFS=.
	for w in $1; do f=$f/$w; done
	unset IFS
	[ -e "$f" ] || return 0
	# cat, not read: the shell reads a byte at a time, and an integer sysctl read at an
	# offset past 0 answers end-of-file (pid_max 32768 would read as "3")
	cur=$(cat "$f" 2>/dev/null) || cur=""
	if [ "$cur" != "$2" ]; then
		echo "$2" >"$f"
		changed "sysctl $1=$2"
	fi
	if [ -n "${LEVER_SYSCTL_FILE:-}" ]; then
		line="$1=$2" seen=""
		if [ -f "$LEVER_SYSCTL_FILE" ]; then
			while IFS= read -r l || [ -n "$l" ]; do [ "$l" = "$line" ] && seen=1; done <"$LEVER_SYSCTL_FILE"
		fi
		[ -n "$seen" ] || { echo "$line" >>"$LEVER_SYSCTL_FILE"; changed "persisted $line"; }
	fi
}
setsys kernel.apparmor_restrict_unprivileged_userns 0
setsys kernel.unprivileged_userns_clone 1
if [ -e /proc/sys/user/max_user_namespaces ] && [ "$(cat /proc/sys/user/max_user_namespaces)" -lt 1024 ]; then
	setsys user.max_user_namespaces 15000
fi

# 5. the run user's podman engine: crun on cgroup v2, runc where crun cannot run (hybrid
# cgroup v1 hosts); cgroupfs and a file event log when there is no user systemd.
# exit_command_delay 10: every exec session (lever shell, lever run, the observation's
# probes) has a conmon that, by default, sleeps 300 s after the command ends before it runs
# podman's cleanup of the session; each verb left one behind for five minutes. Not 0: the
# cleanup then races lever for the session's record, and lever (which reads the exit code
# over the API once the output ends: containers.Exec) was seen to find it gone ("no exec
# session ... found"). 10 s leaves the record for that read and the conmon gone soon after.
runtime=runc
if [ -e /sys/fs/cgroup/cgroup.controllers ] && command -v crun >/dev/null 2>&1; then runtime=crun; fi
cgm=cgroupfs
if [ -d /run/systemd/system ] && [ -S "$rt/systemd/private" ] || [ -S "$rt/bus" ]; then cgm=systemd; fi
conf="$home/.config/containers/containers.conf"
want="[engine]
runtime = \"$runtime\"
cgroup_manager = \"$cgm\"
events_logger = \"file\"
exit_command_delay = 10
"
if [ "$(cat "$conf" 2>/dev/null)
" != "$want" ]; then
	# Written as the run user: the path is in its home, where a symlink it planted would
	# otherwise make root overwrite any file in the guest.
	runuser -u "$U" -- sh -c 'mkdir -p "$(dirname "$1")" && printf "%s" "$2" >"$1"' sh "$conf" "$want"
	changed "$conf (runtime $runtime, cgroups $cgm)"
fi

# 6. the stamp, root-owned, last: it names this script's hash and this boot
read -r boot </proc/sys/kernel/random/boot_id # a string sysctl: read works (see setsys)
want="$LEVER_HASH $boot"
# the stamp's whole content, as $(cat) would give it: one line, or nothing when it has more
have=""
if [ -f "$LEVER_STAMP" ]; then { read -r have || true; if read -r _; then have=""; fi; } <"$LEVER_STAMP"; fi
if [ "$have" != "$want" ] || [ "$(stat -c '%u %g %a' "$LEVER_STAMP" 2>/dev/null)" != "0 0 644" ]; then
	install -d -o root -g root -m 0755 "${LEVER_STAMP%/*}"
	printf '%s\n' "$want" >"$LEVER_STAMP.tmp"
	chown root:root "$LEVER_STAMP.tmp"
	chmod 0644 "$LEVER_STAMP.tmp"
	mv "$LEVER_STAMP.tmp" "$LEVER_STAMP"
	changed "stamp $LEVER_STAMP"
fi
put uid "$uid"
put runtime "$runtime"
