package containers

import (
	"context"
	"fmt"

	"github.com/lever-jail/lever/internal/guest"
)

// SocketPath is the run user's podman REST socket.
func SocketPath(uid int) string { return fmt.Sprintf("/run/user/%d/podman/podman.sock", uid) }

// serviceScript starts the run user's podman REST service once: under systemd it is the
// user's podman.socket; without systemd (the netns substrate) a detached `podman system
// service` whose pid is kept beside the socket. Started through the Runner, so on the netns
// substrate the service, and every container it starts with host networking, lives in the
// jail's network namespace.
const serviceScript = `set -eu
uid=$(id -u); export XDG_RUNTIME_DIR=/run/user/$uid HOME=$(getent passwd "$uid" | cut -d: -f6)
sock=$XDG_RUNTIME_DIR/podman/podman.sock; pidf=$XDG_RUNTIME_DIR/podman/lever-service.pid
cd "$HOME"
if [ -S "$XDG_RUNTIME_DIR/systemd/private" ] && command -v systemctl >/dev/null; then
	systemctl --user enable --now podman.socket >/dev/null 2>&1 && { echo ready; exit 0; }
fi
# alive: the recorded pid runs and is not a zombie (kill -0 succeeds on a zombie, and a
# killed service's zombie lingers where init does not reap)
alive() { [ -f "$1" ] || return 1; st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$(cat "$1")/status" 2>/dev/null); [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]; }
if [ -S "$sock" ] && alive "$pidf"; then echo ready; exit 0; fi
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
`

// StartService makes sure the run user's podman REST service listens (one guest call).
//
// It runs as root and re-enters the guest init's mount namespace before dropping to the run
// user: `ip netns exec` (the netns substrate's Runner) gives each command a private mount
// namespace with a fresh /sys that has no cgroup mounts, under which the OCI runtime cannot
// create a container. nsenter --mount keeps the current network namespace, so the service
// and its host-network containers still live in the jail's; on a VM it is a no-op. Where
// PID 1's namespace is closed to root (a microVM init), the caller's (the parent, which on
// the netns substrate is lever itself, in the host's mount namespace) is used.
func StartService(ctx context.Context, r guest.Runner, user string) error {
	argv := []string{"/bin/sh", "-c", `m=/proc/1/ns/mnt; [ -r "$m" ] && nsenter --mount="$m" true 2>/dev/null || m=/proc/$PPID/ns/mnt
exec nsenter --mount="$m" -- runuser -u "$1" -- /bin/sh -c "$2"`, "sh", user, serviceScript}
	if _, err := guest.RunOK(ctx, r, guest.Cmd{As: guest.Root, Argv: argv}); err != nil {
		return fmt.Errorf("starting the podman service of run user %s: %w", user, err)
	}
	return nil
}

// StopService stops a service StartService detached (the systemd socket is left to systemd).
func StopService(ctx context.Context, r guest.Runner, uid int) error {
	_, err := guest.RunOK(ctx, r, guest.Cmd{As: guest.RunUser, Argv: []string{"/bin/sh", "-c",
		`pidf=/run/user/$(id -u)/podman/lever-service.pid; [ -f "$pidf" ] || exit 0; kill "$(cat "$pidf")" 2>/dev/null || true; rm -f "$pidf"`}})
	if err != nil {
		return fmt.Errorf("stopping the run user's podman service: %w", err)
	}
	return nil
}
