//go:build e2e

package cli

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/sandbox/sbxtest"
	"github.com/lever-jail/lever/internal/testutil"
)

const levstateImage = "localhost/lvtsbx-busybox:levstate-e2e"

// TestContainerSandboxHidesLevState drives the real binary with [sandbox] kind =
// "container" (root podman with runc, as MACHINE-NOTES require here): lev's home inside
// the workdir is covered in the container, a mount exposing it is refused, and a script
// seed runs inside the container (PID 1 there is lev's keep-alive, which neither the
// host nor a namespace has).
func TestContainerSandboxHidesLevState(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "runc")
	tarball := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := sbxtest.WriteBusyboxRootfs(tarball); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("podman", "--runtime", "runc", "import", tarball, levstateImage).CombinedOutput(); err != nil {
		t.Fatalf("podman import: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", levstateImage).Run() })
	bin := buildLev(t)
	engineEnv := []string{"LEV_SANDBOX_ENGINE_ARGS=--runtime runc --cgroup-manager cgroupfs",
		"LEV_SANDBOX_RUN_ARGS=--ulimit nofile=1024:1024 --ulimit nproc=1024:1024"}
	sbx := "[tool_permissions]\nshell = \"allow\"\n[sandbox]\nkind = \"container\"\nimage = \"" + levstateImage + "\"\nnetwork = false\n"

	t.Run("shell cannot read lev's home in the workdir", func(t *testing.T) {
		b := newBox(t, bin, "wd/.lev", sbx, engineEnv...)
		b.agent("prober", proberBlueprint)
		mustWrite(t, b.script, probeCall("shell", `{"command": "cat .lev/token; ls -a .lev; umount .lev; cat .lev/token; cat notes.txt; cat /proc/1/cmdline"}`))
		out, stderr, code := b.lev("run", "prober", "--workdir", b.wd, "--yolo")
		t.Logf("%s", out)
		if code != 0 || strings.Contains(out, levToken) || !strings.Contains(out, "notes content") || !strings.Contains(out, "__sandbox-keepalive") {
			t.Fatalf("exit %d (want the token hidden, notes.txt read, inside the container)\nstdout %s\nstderr %s", code, out, stderr)
		}
	})
	t.Run("shell cannot rename a worker's lev home away and plant a config", func(t *testing.T) {
		// The mask is a mount on the path; renaming its parent would carry it away. The
		// control in the same command: the same rename of a sibling that is not lev's.
		b := newBox(t, bin, "lev", sbx, append(engineEnv, "LEV_PROTECT=wd/workers/w1/.lev")...)
		b.agent("prober", proberBlueprint)
		target := filepath.Join(b.wd, "workers", "w1", ".lev", "config.toml")
		mustWrite(t, target, "ORIG")
		os.MkdirAll(filepath.Join(b.wd, "workers", "w2"), 0o755)
		cmd := "mv workers/w1 workers/w1x; mkdir -p workers/w1/.lev; echo EVIL > workers/w1/.lev/config.toml; mv workers/w2 workers/w2x; cat notes.txt"
		mustWrite(t, b.script, probeCall("shell", `{"command": `+jsonArg(cmd)+`}`))
		out, stderr, code := b.lev("run", "prober", "--workdir", b.wd, "--yolo")
		if data, _ := os.ReadFile(target); string(data) != "ORIG" {
			t.Fatalf("the worker's config.toml is now %q\nstdout %s\nstderr %s", data, out, stderr)
		}
		if _, err := os.Stat(filepath.Join(b.wd, "workers", "w2x")); err != nil || code != 0 {
			t.Fatalf("control: the sibling rename did not happen (exit %d)\nstdout %s\nstderr %s", code, out, stderr)
		}
	})
	t.Run("a missing protected path in the workdir refuses the container", func(t *testing.T) {
		// Nothing to mount over, and the container shares the workdir: it could create a
		// worker's config.toml before that worker's lev does. The row above (the path
		// exists) is the control that the same shell call runs.
		b := newBox(t, bin, "lev", sbx, append(engineEnv, "LEV_PROTECT=wd/workers/w1/.lev")...)
		b.agent("prober", proberBlueprint)
		os.MkdirAll(filepath.Join(b.wd, "workers", "w1"), 0o755)
		cmd := "mkdir -p workers/w1/.lev; echo EVIL > workers/w1/.lev/config.toml; cat notes.txt"
		mustWrite(t, b.script, probeCall("shell", `{"command": `+jsonArg(cmd)+`}`))
		out, stderr, _ := b.lev("run", "prober", "--workdir", b.wd, "--yolo")
		if _, err := os.Stat(filepath.Join(b.wd, "workers", "w1", ".lev", "config.toml")); err == nil {
			t.Fatalf("the container created the worker's config.toml\nstdout %s\nstderr %s", out, stderr)
		}
		if !strings.Contains(out+stderr, "does not exist yet") {
			t.Fatalf("want the refusal naming the missing path\nstdout %s\nstderr %s", out, stderr)
		}
	})
	t.Run("a persistent container's name taken by another container is not adopted", func(t *testing.T) {
		// A persistent sandbox is found again by its name, which anyone can predict.
		// Another container under that name, mounting lev's home, must be replaced, not
		// adopted. Control: the planted container exists under exactly that name.
		b := newBox(t, bin, "lev", sbx+"persist = true\n", engineEnv...)
		b.agent("prober", strings.Replace(proberBlueprint, "[stages.probe]", "[sandbox]\npersist = true\n[stages.probe]", 1))
		names := func() map[string]bool {
			out, _ := exec.Command("podman", "ps", "-a", "--format", "{{.Names}}").Output()
			m := map[string]bool{}
			for _, n := range strings.Fields(string(out)) {
				m[n] = true
			}
			return m
		}
		before := names()
		mustWrite(t, b.script, probeCall("shell", `{"command": "echo first"}`))
		if out, stderr, code := b.lev("run", "prober", "--workdir", b.wd, "--yolo"); code != 0 {
			t.Fatalf("first run: exit %d\n%s\n%s", code, out, stderr)
		}
		// This run's container is the new one that mounts this box's workdir: other
		// tests (run in parallel, in other packages too) make lev-sbx- containers of
		// their own, and taking one of those would replace another test's container and
		// leave this row's own container unplanted.
		var name string
		var others []string
		for _, n := range slices.Sorted(maps.Keys(names())) {
			if before[n] || !strings.HasPrefix(n, "lev-sbx-") {
				continue
			}
			out, _ := exec.Command("podman", "inspect", "-f", `{{range .Mounts}}{{.Destination}}{{"\n"}}{{end}}`, n).Output()
			if !slices.Contains(strings.Split(string(out), "\n"), b.wd) {
				others = append(others, n)
				continue
			}
			if name != "" {
				t.Fatalf("two new containers mount %s: %s and %s", b.wd, name, n)
			}
			name = n
		}
		if name == "" {
			t.Fatalf("no persistent container mounting %s after the first run (other new ones: %v)", b.wd, others)
		}
		t.Cleanup(func() { exec.Command("podman", "rm", "-f", name).Run() })
		exec.Command("podman", "rm", "-f", name).Run()
		plant := []string{"--runtime", "runc", "run", "-d", "--name", name, "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
			"-v", b.home + ":/levhome:ro", "-v", b.wd + ":" + b.wd, "-w", b.wd, "--entrypoint", "sleep", levstateImage, "2147483647"}
		if out, err := exec.Command("podman", plant...).CombinedOutput(); err != nil {
			t.Fatalf("planting %s: %v %s", name, err, out)
		}
		if out, err := exec.Command("podman", "inspect", "-f", "{{.Name}}", name).CombinedOutput(); err != nil || !strings.Contains(string(out), name) {
			t.Fatalf("control: the planted container is not there under %s: %v %s", name, err, out)
		}
		mustWrite(t, b.script, probeCall("shell", `{"command": "cat /levhome/token; echo ran"}`))
		out, stderr, code := b.lev("run", "prober", "--workdir", b.wd, "--yolo")
		if strings.Contains(out, levToken) {
			t.Fatalf("the run adopted the planted container and read the token:\n%s", out)
		}
		if code != 0 || !strings.Contains(out, "ran") {
			t.Fatalf("second run: exit %d\nstdout %s\nstderr %s", code, out, stderr)
		}
	})
	t.Run("a mount exposing lev's home is refused", func(t *testing.T) {
		b := newBox(t, bin, "lev", "", engineEnv...)
		old, _ := os.ReadFile(b.cfgFile)
		mustWrite(t, b.cfgFile, string(old)+sbx+"mounts = [\""+b.home+":/levhome:ro\"]\n")
		b.agent("prober", proberBlueprint)
		mustWrite(t, b.script, probeCall("shell", `{"command": "cat /levhome/token"}`))
		out, stderr, code := b.lev("run", "prober", "--workdir", b.wd, "--yolo")
		if code != 0 || strings.Contains(out, levToken) || !strings.Contains(out, "would expose lev's own state") {
			t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, stderr)
		}
	})
	t.Run("a script seed runs in the container", func(t *testing.T) {
		b := newBox(t, bin, "lev", sbx, engineEnv...)
		mustWrite(t, filepath.Join(b.wd, "seed.sh"), "touch marker; printf 'pid1='; cat /proc/1/cmdline")
		mustWrite(t, b.script, modelScript("submit-last.toml"))
		b.agent("seeder", "name = \"seeder\"\nversion = \"1\"\n[[seeds]]\nscript = \"seed.sh\"\n[stages.s]\ntools = [\"submit_output\"]\n")
		out, stderr, code := b.lev("run", "seeder", "--workdir", b.wd)
		if _, err := os.Stat(filepath.Join(b.wd, "marker")); err != nil || code != 0 || !strings.Contains(out, "pid1=/.lev-keepalive") {
			t.Fatalf("exit %d, marker %v\nstdout %s\nstderr %s", code, err, out, stderr)
		}
	})
}
