package config

// What lever.yaml names on the host is checked where it lies: secret files, lev's settings
// files, the host inputs bring-up reads, and the Lima tools on PATH. (Split from
// validate.go by concern; the rules are unchanged.)

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lever-jail/lever/internal/fspath"
)

// secretFile checks a file that holds a secret: it exists, is a regular file, is mode
// 0600 (nobody but the owner can read it), and is outside the tree, because everything
// in the tree is visible inside the jail. abs is the path resolve made absolute.
func (v *validator) secretFile(key, abs string) {
	st, err := os.Stat(abs)
	if err != nil {
		v.add(key, "%s does not exist", abs)
		return
	}
	if !st.Mode().IsRegular() {
		v.add(key, "%s is not a regular file", abs)
		return
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		v.add(key, "%s has mode %04o; a file holding a secret must be mode 0600 (chmod 600 %s)", abs, perm, abs)
		return
	}
	if v.treePath != "" {
		if real, err := filepath.EvalSymlinks(abs); err == nil && fspath.Within(v.treePath, real) {
			v.add(key, "%s is inside the tree (%s), which the jail can read; keep secrets outside the tree", real, v.treePath)
		}
	}
}

func (v *validator) lev(c *Config) {
	if c.Lev.Image != "" && c.Lev.ImageTarball != "" {
		v.add("lev.image_tarball", "set lev.image or lev.image_tarball, not both")
	}
	if c.Lev.ImageTarball != "" {
		// lever loads it and runs it as every lev container (the holder of the broker
		// certificate and the permission and taint gates).
		v.hostInput("lev.image_tarball", c.Lev.ImageTarball, "keep lev's image outside the tree")
	}
	if c.Lev.BaseImage != "" && c.Lev.BaseTarball != "" {
		v.add("lev.base_tarball", "set lev.base_image or lev.base_tarball, not both")
	}
	if c.Lev.BaseImage != "" && !imageRefRE.MatchString(c.Lev.BaseImage) {
		v.add("lev.base_image", "%q is not an image reference or ID", c.Lev.BaseImage)
	}
	if c.Lev.BaseTarball != "" {
		// A base in the tree would let an agent choose what every agent's workbench (a
		// worker's too) is made of at the next lever up.
		v.hostInput("lev.base_tarball", c.Lev.BaseTarball, "keep the base image outside the tree")
	}
	if c.Lev.Blueprint != "" {
		v.inTree("lev.blueprint", c.Lev.Blueprint)
	}
	v.levSetting("lev.config", c.Lev.Config, false)
	v.levSetting("lev.agents", c.Lev.Agents, true)
	v.levSetting("lev.policy", c.Lev.Policy, false)
}

// levSetting checks a host path of the user's lev settings: it exists, is a file (or, for
// lev.agents, a directory), and is not in the tree by any spelling: the agents write the
// tree, and a later lever up would push their edit into lev's settings. real is the path
// resolve followed through its symlinks, the one lever reads, so what is checked is what
// is read.
func (v *validator) levSetting(key, real string, dir bool) {
	if real == "" {
		return
	}
	abs := v.res.written[key]
	if err := v.res.errs[key]; err != nil {
		v.add(key, "%s: %v", abs, err)
		return
	}
	st, err := os.Stat(real)
	switch {
	case err != nil:
		v.add(key, "%s: %v", real, err)
		return
	case dir && !st.IsDir():
		v.add(key, "%s is not a directory (a directory of lev blueprints)", real)
		return
	case !dir && !st.Mode().IsRegular():
		v.add(key, "%s is not a regular file", real)
		return
	}
	if v.treePath != "" {
		if in, why := inTreeAnySpelling(v.treePath, real); in {
			if real != abs {
				why = " (it resolves to " + real + ")" + why
			}
			v.add(key, "%s is inside the tree (%s)%s: the agents write the tree, so a later lever up would push their edit into lev's settings; keep lev's settings outside the tree", abs, v.treePath, why)
		}
	}
}

// hostInput checks a host file that lever loads, boots or runs (an image, a kernel,
// limactl): it is a regular file, and it is not in the tree by any spelling. The agents
// write the tree, so a file there is theirs to replace before the next lever command
// reads it: their image in every lev container, their kernel under the jail, their
// limactl run on this host. keep is the advice that ends the problem.
func (v *validator) hostInput(key, abs, keep string) {
	st, err := os.Stat(abs)
	if err != nil || !st.Mode().IsRegular() {
		v.add(key, "%s is not a file", abs)
		return
	}
	if v.treePath == "" {
		return
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		v.add(key, "%s: %v", abs, err)
		return
	}
	if in, why := inTreeAnySpelling(v.treePath, real); in {
		v.add(key, "%s is inside the tree (%s)%s, which the agents can write; %s", real, v.treePath, why, keep)
		return
	}
	// Another name for the same file could be in the tree, where the agents would write
	// through it.
	if n := linkCount(st); n > 1 {
		v.add(key, "%s has %d hard links; another of its names could be in the tree, which the agents can write: copy the file instead", abs, n)
	}
}

// inTreeAnySpelling says whether real (symlink-free) lies in the tree: by its path, or
// through another mount of the tree's directory (a bind mount has no symlink to follow,
// so each ancestor's device and inode are compared with the tree's), and how (empty for
// the plain path).
func inTreeAnySpelling(tree, real string) (bool, string) {
	if fspath.Within(tree, real) {
		return true, ""
	}
	tst, err := os.Stat(tree)
	if err != nil {
		return false, ""
	}
	for cur := real; ; {
		if st, err := os.Stat(cur); err == nil && os.SameFile(st, tst) {
			return true, " (" + cur + " is the tree's directory mounted at another path)"
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return false, ""
		}
		cur = parent
	}
}

func (v *validator) lima(c *Config) {
	if c.Lima.CPUs < 1 {
		v.add("lima.cpus", "%d is not a CPU count (at least 1)", c.Lima.CPUs)
	}
	if !sizeRE.MatchString(c.Lima.Memory) {
		v.add("lima.memory", "%q is not a size: use a number with a unit, e.g. 4GiB", c.Lima.Memory)
	}
	for _, f := range []struct {
		key string
		val *string
	}{{"lima.image", &c.Lima.Image}, {"lima.kernel", &c.Lima.Kernel}, {"lima.initrd", &c.Lima.Initrd}} {
		if *f.val == "" {
			continue
		}
		v.hostInput(f.key, *f.val, "keep what the VM boots outside the tree")
	}
	v.limactl(c.Lima.Limactl)
	switch c.Lima.Accel {
	case "auto", "kvm", "tcg":
	default:
		v.add("lima.accel", "%q is not an accelerator: use auto, kvm or tcg", c.Lima.Accel)
	}
	if (c.Lima.Kernel != "") != (c.Lima.Initrd != "") {
		v.add("lima.kernel", "lima.kernel and lima.initrd go together (direct kernel boot needs both)")
	}
}

// limactl checks lima.limactl given as a path: a program lever runs on this host as the
// user, so not in the tree (a name is looked up on PATH, which hostPATH checks).
func (v *validator) limactl(name string) {
	if !strings.ContainsRune(name, '/') || v.treePath == "" {
		return
	}
	// A path that does not exist is the lima backend's to report, when it is needed.
	real, err := filepath.EvalSymlinks(name)
	if err != nil {
		return
	}
	if in, why := inTreeAnySpelling(v.treePath, real); in {
		v.add("lima.limactl", "%q is at %s, inside the tree (%s)%s, which the agents can write; keep the programs lever runs outside the tree", name, real, v.treePath, why)
	}
}

// hostPATH refuses a PATH entry in the tree. lever runs programs it finds on PATH as the
// user (limactl, ssh, orb, and qemu through limactl; ip and iptables on the netns
// substrate): one the agents wrote there would run at the next lever command (direnv's
// PATH_add bin is the usual way a project directory gets on PATH). Relative entries are
// not followed by Go's exec, so only absolute ones count.
func (v *validator) hostPATH() {
	if v.treePath == "" {
		return
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if !filepath.IsAbs(dir) {
			continue
		}
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue
		}
		if in, why := inTreeAnySpelling(v.treePath, real); in {
			v.add("tree", "PATH has %s, inside the tree (%s)%s: lever runs programs it finds on PATH (limactl, ssh, orb, qemu, ip, iptables), and the agents write the tree; take the tree's directories off PATH before running lever", dir, v.treePath, why)
			return
		}
	}
}

// linkCount is a file's number of hard links (1 where the platform does not say).
func linkCount(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(s.Nlink)
	}
	return 1
}
