package lima

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/guest"
)

// The warm path's guest half on the recorded guest: ONE guest call (the egress snapshot,
// which carries the containment check) for an intact VM; each in-guest drift is refused,
// naming it, before anything changes (no second call). The snapshot exchange's egress part
// replays the real VM's recorded chains through this host's iptables/nft (same Debian 12
// versions as the guest image), its containment part is the real guest's mounts.
func TestWarmContainmentOnRecordedGuest(t *testing.T) {
	rec := loadRecording(t)
	snapEx := rec.Exchanges[1]
	spec := rec.Spec
	spec.CheckContainment = func(secs guest.Sections) error {
		return checkContainment(secs, "fuse.sshfs", rec.Tree, false)
	}
	if spec.Containment != containmentScript {
		t.Fatalf("the recording's containment script is not the backend's: re-record it")
	}
	// edit rewrites one section of the recorded answer (its body, line by line).
	edit := func(name string, f func(lines []string) []string) exchange {
		e := snapEx
		begin, end := recordedMark+"begin "+name+"\n", recordedMark+"end "+name+" "
		head, rest, ok := strings.Cut(e.Stdout, begin)
		body, tail, ok2 := strings.Cut(rest, end)
		if !ok || !ok2 {
			t.Fatalf("the recording has no section %s: re-record it", name)
		}
		e.Stdout = head + begin + strings.Join(f(strings.Split(strings.TrimSuffix(body, "\n"), "\n")), "\n") + "\n" + end + tail
		return e
	}
	replace := func(prefix, to string) func([]string) []string {
		return func(ls []string) []string {
			var out []string
			for _, l := range ls {
				if strings.HasPrefix(l, prefix) {
					if to == "" {
						continue
					}
					l = to
				}
				out = append(out, l)
			}
			return out
		}
	}
	add := func(l string) func([]string) []string { return func(ls []string) []string { return append(ls, l) } }
	const mounts = guest.ContainmentPrefix + "mounts"
	cases := []struct {
		name string
		ex   exchange
		want string // "" = passes
	}{
		{"intact (positive control)", snapEx, ""},
		{"/lever unmounted", edit(mounts, replace("/lever ", "")), "/lever is not mounted in the guest"},
		{"a second host mount", edit(mounts, add(`/home/lvtl\x20x fuse.sshfs rw,nosuid,nodev :/home/lvtl`)), "a second host-backed mount: /home/lvtl x (fuse.sshfs from :/home/lvtl)"},
		{"a mount stacked over /lever", edit(mounts, add("/lever tmpfs rw,relatime tmpfs")), "2 mounts are stacked at /lever (fuse.sshfs, tmpfs)"},
		{"/lever from another host dir", edit(mounts, replace("/lever ", "/lever fuse.sshfs rw,nosuid,nodev :/home/lvtl306ea2")), "/lever comes from :/home/lvtl306ea2, not the tree"},
		{"/dev/kvm without nested_virt", edit(guest.ContainmentPrefix+"kvm", replace("no", "yes")), "nested_virt is off but the guest has /dev/kvm"},
		{"a 9p share", edit(mounts, add("/mnt/host 9p rw,sync,dirsync trans=virtio")), "a second host-backed mount: /mnt/host (9p"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &guest.Counting{Inner: &replay{ex: []exchange{c.ex}}}
			rep, err := guest.EnsureEgress(context.Background(), r, spec)
			if n := r.Calls(); n != 1 {
				t.Errorf("%d guest calls, want 1 (the snapshot carries the check)", n)
			}
			if c.want == "" {
				if err != nil || rep.Outcome != guest.Unchanged {
					t.Fatalf("intact guest: outcome %q, err %v", rep.Outcome, err)
				}
				return
			}
			if err == nil || !errors.Is(err, guest.ErrContainment) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want a containment refusal naming %q", err, c.want)
			}
		})
	}
}

// The warm path's host half: `limactl list --json` recorded from the real VM, replayed by
// a stand-in limactl. An intact VM passes; each override the real VM was given is refused,
// naming it. Exactly one limactl call either way.
func TestWarmCheckHostOnRecordedList(t *testing.T) {
	old := geteuid
	geteuid = func() int { return 1000 }
	t.Cleanup(func() { geteuid = old })
	for _, c := range []struct{ file, want string }{
		{"list-fresh.json", ""},
		{"list-override-mount.json", "mounts[1]: /home/lvtl/extra at /extra (writable=false) is not in the template"},
		{"list-override-containerd.json", "containerd.user: true, template asks for false"},
		{"list-override-portforward.json", "portForwards[0]"},
	} {
		t.Run(c.file, func(t *testing.T) {
			dir := t.TempDir()
			fixture, _ := filepath.Abs(filepath.Join("testdata", c.file))
			bin := filepath.Join(dir, "limactl")
			log := filepath.Join(dir, "calls")
			os.WriteFile(bin, []byte("#!/bin/sh\necho \"$*\" >>"+log+"\n[ \"$*\" = 'list --json' ] || exit 9\ncat "+fixture+"\n"), 0o755)
			t.Setenv("LIMA_HOME", dir)
			cfg := &config.Config{Name: "lvtl", Backend: "lima", TreePath: "/home/lvtl/proj/tree", Dir: "/home/lvtl/proj",
				Lima: config.Lima{Image: "/i/disk.qcow2", Kernel: "/i/vmlinuz", Initrd: "/i/initrd.img", Limactl: bin}}
			l, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = l.CheckHost(context.Background())
			calls, _ := os.ReadFile(log)
			if string(calls) != "list --json\n" {
				t.Errorf("limactl calls %q, want one `list --json`", calls)
			}
			if c.want == "" {
				if err != nil {
					t.Fatalf("intact VM refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "realized config differs") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want a drift refusal naming %q", err, c.want)
			}
		})
	}
}
