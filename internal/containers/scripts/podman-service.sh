# shellcheck shell=sh
# The run user's podman REST service, started once (containers.StartService runs this as the run
# user, from scripts/start-service.sh). Under systemd it is the user's podman.socket;
# without systemd (the netns substrate) a detached `podman system service` whose pid is
# kept beside the socket. Prints "ready" (already listening) or "started".
set -eu
uid=$(id -u)
HOME=$(getent passwd "$uid" | cut -d: -f6)
XDG_RUNTIME_DIR=/run/user/$uid
export HOME XDG_RUNTIME_DIR
sock=$XDG_RUNTIME_DIR/podman/podman.sock; pidf=$XDG_RUNTIME_DIR/podman/lever-service.pid
cd "$HOME"
# alive: the recorded pid runs and is not a zombie (kill -0 succeeds on a zombie, and a
# killed service's zombie lingers where init does not reap)
alive() { [ -f "$1" ] || return 1; st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$(cat "$1")/status" 2>/dev/null); [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]; }
# Listening already: systemd's socket (no pid file of ours) or our detached service alive.
# The observation's rule, checked first: a cold bring-up, whose observation could not
# run, otherwise pays for `systemctl --user enable --now` (~3 s under TCG) to learn it.
if [ -S "$sock" ] && { [ ! -f "$pidf" ] || alive "$pidf"; }; then echo ready; exit 0; fi
if [ -S "$XDG_RUNTIME_DIR/systemd/private" ] && command -v systemctl >/dev/null; then
	systemctl --user enable --now podman.socket >/dev/null 2>&1 && { echo ready; exit 0; }
fi
# a guest "reboot" (the netns substrate's stop) kills the rootless pause process but leaves
# its pid file, which podman would then try to join
pause=$XDG_RUNTIME_DIR/libpod/tmp/pause.pid
if [ -f "$pause" ] && ! alive "$pause"; then rm -f "$pause"; podman system migrate >/dev/null 2>&1 || true; fi
mkdir -p "$XDG_RUNTIME_DIR/podman"; rm -f "$sock"
# Two attempts: a service that dies at once over a stale rootless namespace is retried
# after podman system migrate, which resets it.
for attempt in 1 2; do
	setsid podman system service --time=0 "unix://$sock" >"$XDG_RUNTIME_DIR/podman/lever-service.log" 2>&1 </dev/null &
	echo $! >"$pidf"
	i=0; while [ ! -S "$sock" ] && [ $i -lt 300 ] && alive "$pidf"; do sleep 0.1; i=$((i+1)); done
	[ -S "$sock" ] && { echo started; exit 0; }
	[ $attempt = 1 ] && { podman system migrate >/dev/null 2>&1 || true; }
done
echo "podman service did not create $sock:" >&2; cat "$XDG_RUNTIME_DIR/podman/lever-service.log" >&2; exit 1
