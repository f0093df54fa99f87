package bringup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/levimage/debroot"
)

type fakeRunner struct {
	res  guest.Result
	argv [][]string
}

func (f *fakeRunner) Run(_ context.Context, c guest.Cmd) (guest.Result, error) {
	f.argv = append(f.argv, c.Argv)
	return f.res, nil
}

// TestBuildDebianBenchRefusals: what the guest's package read returns decides before any
// image is touched (the client is nil here: reaching it would panic).
func TestBuildDebianBenchRefusals(t *testing.T) {
	cases := []struct {
		name string
		res  guest.Result
		want string
	}{
		{"no dpkg database", guest.Result{ExitCode: 3, Stderr: []byte("no /var/lib/dpkg/status: not a Debian-family guest")},
			"set lev.base_image or lev.base_tarball in /p/lever.yaml"},
		{"read failed", guest.Result{ExitCode: 1, Stderr: []byte("boom")}, "exit 1: boom"},
		{"cut-off output", guest.Result{Stdout: []byte("@@lever arch\namd64\n@@lever statussum\n" + strings.Repeat("a", 64) + "\n@@lever status\n")}, "incomplete"},
		{"no status digest", guest.Result{Stdout: []byte("@@lever arch\namd64\n@@lever end\n")}, "no dpkg status digest"},
		{"well-formed read (positive control)", guest.Result{Stdout: []byte("@@lever arch\namd64\n@@lever statussum\n" + strings.Repeat("a", 64) +
			"\n@@lever status\nPackage: dash\nStatus: install ok installed\nArchitecture: amd64\n\n@@lever end\n")}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRunner{res: tc.res}
			in := &Instance{cfg: &config.Config{Path: "/p/lever.yaml"}, Runner: &guest.Counting{Inner: f}}
			if tc.want == "" {
				// positive control: a well-formed read gets past the guest checks and on to
				// podman (the nil client), so the refusals above are decided by the read.
				defer func() {
					if recover() == nil {
						t.Error("a well-formed read did not reach the image store")
					}
				}()
			}
			_, _, err := in.buildDebianBench(context.Background(), nil, time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if len(f.argv) != 1 || f.argv[0][2] != debroot.GatherScript {
				t.Errorf("guest calls %v", f.argv)
			}
			if in.statusSum != "" {
				t.Errorf("status digest %q kept from a refused read", in.statusSum)
			}
		})
	}
}
