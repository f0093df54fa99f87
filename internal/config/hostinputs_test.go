package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The agents write the tree. A host file lever loads, boots or runs from there would be
// theirs to replace before the next lever command: each such key is refused in the tree,
// and the same file outside the tree (the control) loads.
func TestHostInputsOutsideTheTree(t *testing.T) {
	cases := []struct {
		name string
		key  string
		// file is made (mode 0755) at this path under the fixture; the body names it
		// where {p} stands.
		file string
		body string
		want string // "" for the control: it must load
	}{
		{"lev image tarball in the tree", "lev.image_tarball", "proj/lev.tar", "lev:\n  image_tarball: {p}\n",
			"lev.image_tarball: {d}/proj/lev.tar is inside the tree ({d}/proj), which the agents can write; keep lev's image outside the tree"},
		{"lev image tarball outside (control)", "", "outside/lev.tar", "lev:\n  image_tarball: {p}\n", ""},
		{"lima image in the tree", "lima.image", "proj/a/debian.qcow2", "lima:\n  image: {p}\n",
			"lima.image: {d}/proj/a/debian.qcow2 is inside the tree ({d}/proj), which the agents can write; keep what the VM boots outside the tree"},
		{"lima kernel in the tree", "lima.kernel", "proj/vmlinuz", "lima:\n  kernel: {p}\n  initrd: outside/initrd\n",
			"lima.kernel: {d}/proj/vmlinuz is inside the tree ({d}/proj), which the agents can write; keep what the VM boots outside the tree"},
		{"lima kernel outside (control)", "", "outside/vmlinuz", "lima:\n  kernel: {p}\n  initrd: outside/initrd\n", ""},
		{"limactl path in the tree", "lima.limactl", "proj/bin/limactl", "lima:\n  limactl: {p}\n",
			`lima.limactl: "{d}/proj/bin/limactl" is at {d}/proj/bin/limactl, inside the tree ({d}/proj), which the agents can write; keep the programs lever runs outside the tree`},
		{"limactl path outside (control)", "", "outside/bin/limactl", "lima:\n  limactl: {p}\n", ""},
		{"limactl reached through a symlink outside the tree", "lima.limactl", "proj/bin/limactl", "lima:\n  limactl: outside/limactl-link\n",
			`lima.limactl: "{d}/outside/limactl-link" is at {d}/proj/bin/limactl, inside the tree ({d}/proj), which the agents can write; keep the programs lever runs outside the tree`},
		{"lev image tarball hard-linked", "lev.image_tarball", "outside/lev.tar", "lev:\n  image_tarball: {p}\n",
			"lev.image_tarball: {d}/outside/lev.tar has 2 hard links; another of its names could be in the tree, which the agents can write: copy the file instead"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := fixture(t)
			for _, f := range []string{tc.file, "outside/initrd"} {
				os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755)
				if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if strings.Contains(tc.name, "hard-linked") {
				if err := os.Link(filepath.Join(dir, tc.file), filepath.Join(dir, "proj", "lev.tar")); err != nil {
					t.Fatal(err)
				}
			}
			if strings.Contains(tc.body, "limactl-link") {
				if err := os.Symlink(filepath.Join(dir, tc.file), filepath.Join(dir, "outside", "limactl-link")); err != nil {
					t.Fatal(err)
				}
			}
			body := base + strings.ReplaceAll(tc.body, "{p}", tc.file)
			_, err := load(t, dir, body)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("the control did not load: %v", err)
				}
				return
			}
			want := strings.ReplaceAll(tc.want, "{d}", dir)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v\nwant it to contain %s", err, want)
			}
			if strings.Count(err.Error(), "\n") != 0 {
				t.Errorf("more than the one problem: %v", err)
			}
		})
	}
}

// lever runs programs it finds on PATH (limactl, ssh, orb, qemu, ip, iptables): a PATH
// entry in the tree (direnv's PATH_add bin, say) would hand the agents the next lever
// command, whatever the backend.
func TestPATHInTheTree(t *testing.T) {
	dir := fixture(t)
	for _, d := range []string{"proj/bin", "outside/bin"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	os.Symlink(filepath.Join(dir, "proj", "bin"), filepath.Join(dir, "outside", "link"))
	for _, tc := range []struct {
		name, path, want string
	}{
		{"an entry in the tree", filepath.Join(dir, "proj", "bin") + ":/usr/bin:/bin",
			"PATH has " + filepath.Join(dir, "proj", "bin") + ", inside the tree (" + filepath.Join(dir, "proj") + ")"},
		{"a symlink outside to a directory in the tree", "/usr/bin:" + filepath.Join(dir, "outside", "link"),
			"PATH has " + filepath.Join(dir, "outside", "link") + ", inside the tree"},
		{"outside only (control)", filepath.Join(dir, "outside", "bin") + ":/usr/bin:/bin", ""},
		{"a relative entry (Go's exec does not follow it)", "proj/bin:/usr/bin", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PATH", tc.path)
			for _, backend := range []string{"lima", "orbstack"} {
				_, err := load(t, dir, strings.Replace(base, "backend: lima", "backend: "+backend, 1))
				if tc.want == "" {
					if err != nil && strings.Contains(err.Error(), "PATH") {
						t.Errorf("%s: refused: %v", backend, err)
					}
					continue
				}
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: error %v\nwant it to contain %s", backend, err, tc.want)
				}
			}
		})
	}
}

// lever.yaml in the tree (tree: .) is the default layout: it loads, and ConfigInTree
// names it so bring-up mounts it read-only for the agents. Anywhere the read-only mount
// would not hold (deeper in the tree, a second name) is refused.
func TestConfigFileInTheTree(t *testing.T) {
	body := "name: demo\nbackend: lima\ntree: .\nbroker:\n  api_key_file: ../key\n"
	cases := []struct {
		name   string
		layout func(t *testing.T, proj string) string // returns the path to load
		inTree string
		want   string
	}{
		{"at the tree's root (the default layout)", func(t *testing.T, proj string) string {
			p := filepath.Join(proj, "lever.yaml")
			os.WriteFile(p, []byte(body), 0o644)
			return p
		}, "lever.yaml", ""},
		{"outside the tree", func(t *testing.T, proj string) string {
			p := filepath.Join(filepath.Dir(proj), "lever.yaml")
			os.WriteFile(p, []byte(strings.Replace(strings.Replace(body, "tree: .", "tree: proj", 1), "../key", "key", 1)), 0o644)
			return p
		}, "", ""},
		{"a symlink at the root to a file deeper in the tree", func(t *testing.T, proj string) string {
			os.WriteFile(filepath.Join(proj, "a", "lever.yaml"), []byte(body), 0o644)
			p := filepath.Join(proj, "lever.yaml")
			os.Symlink("a/lever.yaml", p)
			return p
		}, "", "tree: the config file's name {proj}/lever.yaml is at the tree's root but is not the file itself (a symlink to {proj}/a/lever.yaml)"},
		{"a symlink at the root to a file outside the tree", func(t *testing.T, proj string) string {
			os.WriteFile(filepath.Join(filepath.Dir(proj), "outside", "lever.yaml"), []byte(strings.Replace(body, "../key", "../../key", 1)), 0o644)
			p := filepath.Join(proj, "lever.yaml")
			os.Symlink("../outside/lever.yaml", p)
			return p
		}, "", "tree: the config file's name {proj}/lever.yaml is at the tree's root but is not the file itself (a symlink to {dir}/outside/lever.yaml): the agents could replace it"},
		{"outside, resolving deeper into the tree", func(t *testing.T, proj string) string {
			os.WriteFile(filepath.Join(proj, "a", "lever.yaml"), []byte(strings.Replace(strings.Replace(body, "tree: .", "tree: proj", 1), "../key", "key", 1)), 0o644)
			p := filepath.Join(filepath.Dir(proj), "lever.yaml")
			os.Symlink("proj/a/lever.yaml", p)
			return p
		}, "", "tree: the config file resolves to {proj}/a/lever.yaml, in the tree ({proj}), where the agents could rewrite it"},
		{"a second name in the tree (hard link)", func(t *testing.T, proj string) string {
			p := filepath.Join(proj, "lever.yaml")
			os.WriteFile(p, []byte(body), 0o644)
			os.Link(p, filepath.Join(proj, "a", "copy.yaml"))
			return p
		}, "", "tree: the config file {proj}/lever.yaml is in the tree ({proj}) and has 2 hard links"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := fixture(t)
			proj := filepath.Join(dir, "proj")
			c, err := Load(tc.layout(t, proj))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if c.ConfigInTree != tc.inTree {
					t.Errorf("ConfigInTree = %q, want %q", c.ConfigInTree, tc.inTree)
				}
				return
			}
			want := strings.NewReplacer("{proj}", proj, "{dir}", dir).Replace(tc.want)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v\nwant it to contain %s", err, want)
			}
		})
	}
}
