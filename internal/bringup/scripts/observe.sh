# shellcheck shell=sh
# Bring-up's observation (Instance.Observe), read-only, in the sections format: the
# provisioning stamp and boot id (read_stamp, provision/stamp.sh), the run user's uid,
# whether its podman service is up, the guest's package-state digest (state_digest,
# debroot/statedigest.sh: the default workbench's tag derives from it), lever's trees
# ($LEVER_TREES: lev's and the workbench's), and per agent
# whether its lev home and bench dir exist, the hash of its pushed lev settings and its
# client certificate; and whether the run user can write the tree (the one write it makes:
# a probe file, removed at once). The egress snapshot (guest/scripts/snapshot.sh) may follow in the
# same call.
# $1 the stamp, $2 the run user, $3 the lev home root, then the agents' dir names.
stamp=$1; user=$2; levhome=$3; shift 3
sec stamp read_stamp "$stamp"
# Every process in this call costs 0.1-0.2 s under emulation, so the shell reads the
# small files itself (rd, read) rather than starting cat, sed or id for them. The run
# user's uid from /etc/passwd, id only for a user it does not list (another NSS source).
uid=none
{ while IFS=: read -r pn _ pu _; do [ "$pn" = "$user" ] && { uid=$pu; break; }; done; } 2>/dev/null </etc/passwd
case $uid in none | '' | *[!0-9]*) uid=$(id -u "$user" 2>/dev/null) || uid=none ;; esac
put uid "$uid"
# proc_state PIDFILE: the one-letter state (R, S, Z, ...) of the process whose pid PIDFILE
# holds, from /proc/<pid>/status; nothing when there is none.
proc_state() {
	pid=; read -r pid 2>/dev/null <"$1"
	case $pid in '' | *[!0-9]*) return 0 ;; esac
	{ while IFS= read -r l; do
		case $l in State:*)
			l=${l#State:}; l=${l#"${l%%[![:space:]]*}"}
			case $l in [A-Z]*) printf '%s\n' "${l%"${l#?}"}" ;; esac
			break ;;
		esac
	done; } 2>/dev/null <"/proc/$pid/status"
}
podman_service() {
	[ "$uid" != none ] || { echo down; return 0; }
	sock=/run/user/$uid/podman/podman.sock; pidf=/run/user/$uid/podman/lever-service.pid
	st=; [ ! -f "$pidf" ] || st=$(proc_state "$pidf")
	if [ -S "$sock" ] && { [ ! -f "$pidf" ] || { [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]; }; }; then echo up; else echo down; fi
}
sec podman podman_service
sec statussum state_digest
# lever's trees (made whole, then renamed into place: a listed one is whole); only root's
# directories count, whatever else appears there (-O: owned by the caller, and guest
# scripts run as root; the glob skips dot names; a symlink is not a directory here)
trees() {
	[ -d "${LEVER_TREES:-/nonexistent}" ] || return 0
	for d in "$LEVER_TREES"/*; do
		if [ -d "$d" ] && [ ! -L "$d" ] && [ -O "$d" ]; then printf '%s\n' "${d##*/}"; fi
	done
}
sec trees trees
# this lever's lev, installed in a VM guest ($LEVER_HELPER; unset in place): a regular file,
# not a symlink (the helper call checks the rest, and installs it when it is gone)
if [ -n "${LEVER_HELPER:-}" ] && [ -f "$LEVER_HELPER" ] && [ ! -L "$LEVER_HELPER" ]; then put helper present; fi
if [ "$uid" != none ]; then
	for a in "$@"; do
		d=missing; [ -d "$levhome/$a" ] && [ -d "/run/user/$uid/lever/bench/$a" ] && d=ok
		put "dirs.$a" "$d"
		sec "settings.$a" rd "/run/user/$uid/lever/agents/$a/settings.sha256"
		sec "cert.$a" rd "/run/user/$uid/lever/agents/$a/client.crt"
	done
fi
# whether the run user can write the tree ($LEVER_TREE_PROBE, the tree as the guest sees
# it): a file made under a name no one had (mktemp) and removed at once, as that user. The
# agents write the tree as the run user; this is the warning before their first write fails.
tree_write() {
	err=$(runuser -u "$user" -- sh -c 'f=$(mktemp -p "$1" .lever-write-probe.XXXXXX) && rm -f -- "$f"' sh "$LEVER_TREE_PROBE" 2>&1) && { echo ok; return 0; }
	printf '%s\n' "$err" | head -c 300
}
# (no runuser: no verdict, rather than a false warning)
if [ -n "${LEVER_TREE_PROBE:-}" ] && [ "$uid" != none ] && command -v runuser >/dev/null 2>&1; then sec treewrite tree_write; fi
# the running containers' in-tree mounts proven again ($LEVER_MOUNTS_REQ, for the helper
# function the host put before this part: lever_mounts_live): a rename-save on the host
# detaches a read-only mount in a running container
if [ -n "${LEVER_MOUNTS_REQ:-}" ] && [ "$uid" != none ]; then
	mounts_live() { printf '%s' "$LEVER_MOUNTS_REQ" | lever_mounts_live; }
	sec mounts mounts_live
fi
