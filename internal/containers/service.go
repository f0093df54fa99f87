package containers

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/lever-jail/lever/internal/guest"
)

// SocketPath is the run user's podman REST socket.
func SocketPath(uid int) string { return fmt.Sprintf("/run/user/%d/podman/podman.sock", uid) }

// serviceScript starts the run user's podman REST service once (`podman system service
// --time=0`: a transient unit of the user's systemd manager where that manager shares the
// jail's network namespace, else a detached process); startScript runs it as the run user
// from the guest init's mount namespace, as the section "service".
var (
	//go:embed scripts/podman-service.sh
	serviceScript string
	//go:embed scripts/start-service.sh
	startScript string
	//go:embed scripts/stop-service.sh
	stopScript string
)

// StartService makes sure the run user's podman REST service listens (one guest call).
// It reports whether it was already listening ("ready") or has been started ("started").
func StartService(ctx context.Context, r guest.Runner, user string) (string, error) {
	sc := guest.NewScript(startScript)
	res, err := guest.RunOK(ctx, r, sc.Cmd([]string{"LEVER_SERVICE=" + serviceScript}, user))
	if err == nil {
		var secs guest.Sections
		if secs, err = sc.Parse(res.Stdout); err == nil {
			var out string
			if out, err = secs.OK("service"); err == nil {
				return strings.TrimSpace(out), nil
			}
		}
	}
	return "", fmt.Errorf("starting the podman service of run user %s: %w", user, err)
}

// StopService stops the service StartService started (by its recorded pid; a podman.socket
// an earlier lever enabled is left to systemd).
func StopService(ctx context.Context, r guest.Runner, uid int) error {
	_, err := guest.RunOK(ctx, r, guest.Cmd{As: guest.RunUser, Argv: []string{"/bin/sh", "-c", stopScript}})
	if err != nil {
		return fmt.Errorf("stopping the run user's podman service: %w", err)
	}
	return nil
}
