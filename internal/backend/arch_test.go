package backend

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/guest"
)

type plainBackend struct{}

func (plainBackend) Name() string                   { return "plain" }
func (plainBackend) EnsureUp(context.Context) error { return nil }
func (plainBackend) Stop(context.Context) error     { return nil }
func (plainBackend) Destroy(context.Context) error  { return nil }
func (plainBackend) Runner() guest.Runner           { return nil }
func (plainBackend) HostAlias() string              { return "" }
func (plainBackend) Profile() Profile               { return Profile{} }

type reportingBackend struct {
	plainBackend
	arch string
	err  error
}

func (r reportingBackend) GuestArch(context.Context) (string, error) { return r.arch, r.err }

// TestGuestArch: a backend's own report wins over the host's architecture; without one,
// only a Linux host's architecture is assumed, and on a Mac lever refuses to guess.
func TestGuestArch(t *testing.T) {
	for _, tc := range []struct {
		name             string
		b                Backend
		hostOS, hostArch string
		want, err        string
	}{
		{"reported arm64 on an amd64 Linux host", reportingBackend{arch: "arm64"}, "linux", "amd64", "arm64", ""},
		{"reported amd64 on an arm64 Mac", reportingBackend{arch: "amd64"}, "darwin", "arm64", "amd64", ""},
		{"report fails", reportingBackend{err: errors.New("no machine")}, "linux", "amd64", "", "plain backend: the guest's architecture: no machine"},
		{"no report, Linux host", plainBackend{}, "linux", "arm64", "arm64", ""},
		{"no report, Mac host", plainBackend{}, "darwin", "arm64", "", "plain backend does not report its guest's architecture"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := guestArch(context.Background(), tc.b, tc.hostOS, tc.hostArch)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %q %v, want error %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q %v, want %s", got, err, tc.want)
			}
		})
	}
}
