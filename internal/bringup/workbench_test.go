package bringup

import (
	"context"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guest/guesttest"
)

// TestPlanDebianBenchRefusals: what the guest's package read returns decides before any
// image is touched (the client is nil here: reaching it would panic).
func TestPlanDebianBenchRefusals(t *testing.T) {
	secs := func(statussum string, names ...string) guesttest.Reply {
		return guesttest.Sections(func(guest.Cmd) []guesttest.Sec {
			all := map[string]guesttest.Sec{"arch": {Out: "amd64"}, "statussum": {Out: statussum},
				"status": {Out: "Package: dash\nStatus: install ok installed\nArchitecture: amd64\n"}}
			var out []guesttest.Sec
			for _, n := range names {
				s := all[n]
				s.Name = n
				out = append(out, s)
			}
			return out
		})
	}
	full := []string{"arch", "statussum", "status", "lists", "rootlinks", "altlinks", "certs", "end"}
	cases := []struct {
		name  string
		reply guesttest.Reply
		want  string
	}{
		{"no dpkg database", guesttest.Exit(3, "no /var/lib/dpkg/status: not a Debian-family guest"),
			"set lev.base_image or lev.base_tarball in /p/lever.yaml"},
		{"read failed", guesttest.Exit(1, "boom"), "exit 1: boom"},
		{"cut-off output", secs(strings.Repeat("a", 64), "arch", "statussum", "status"), "incomplete"},
		{"no status digest", secs("", full...), "no dpkg status digest"},
		// positive control: a well-formed read gets past the guest checks to the planner
		// (which finds base-files missing from this one-package database), so the refusals above
		// are decided by the read.
		{"well-formed read (positive control)", secs(strings.Repeat("a", 64), full...), "planning the workbench: package base-files is not installed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := (&guesttest.Runner{}).On("gather", guesttest.Script("sec statussum state_digest"), tc.reply)
			in := &Instance{cfg: &config.Config{Path: "/p/lever.yaml"}, Runner: &guest.Counting{Inner: r}}
			_, facts, err := in.planDebianBench(context.Background(), nil, Facts{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if n := r.Names(); len(n) != 1 || n[0] != "gather" {
				t.Errorf("guest calls %v", n)
			}
			if refused := !strings.HasPrefix(tc.want, "planning"); refused && facts.StatusSum != "" {
				t.Errorf("status digest %q kept from a refused read", facts.StatusSum)
			}
		})
	}
}
