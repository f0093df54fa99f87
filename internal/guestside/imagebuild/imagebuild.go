// Package imagebuild is the guest side of bring-up's image step: started as root in the
// guest as `lev __guest images`, it makes what lever's containers run, where they run,
// as directory trees that podman runs as overlaid root file systems (--rootfs dir:O):
// lev's tree (levimage.MakeLevRootDir: the helper's own executable, exactly the lev binary
// lever checked and sent) and the default workbench's (levimage.MakeRootDir: the guest's
// own package files). The helper reads the guest's dpkg database itself and plans the
// workbench's files (debroot.PlanRoot, which reads only the workbench's packages' file
// lists), and names its tree
// from the package-state digest (debroot.StateDigest) exactly as bring-up names it from
// the digest its observation read (BenchRequest.Dir): nothing large crosses the guest
// link either way, and nothing is packed, loaded or ID-mapped (under qemu's TCG the
// images these replace took two minutes to build and load, and reading the packages
// from the host a guest call of its own).
//
// It never talks to podman: the trees are root's, made as root under root-owned
// directories, and the containers name them. It must not import the podman bindings, a
// backend or anything host-only: lev links it.
package imagebuild

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lever-jail/lever/internal/levimage"
	"github.com/lever-jail/lever/internal/levimage/debroot"
)

// MaxRequest bounds the request (two trees' names and their mount destinations).
const MaxRequest = 1 << 20

// Request is what the helper reads on stdin. Every path is absolute and clean; the
// parent of each tree must be root's (made by the helper when missing).
type Request struct {
	// LevDir: make lev's tree there, with the lev containers' mount destinations
	// (sorted).
	LevDir    string   `json:"lev_dir,omitempty"`
	LevMounts []string `json:"lev_mounts,omitempty"`
	// Bench: find or make the default workbench's tree from the guest's own packages.
	Bench *BenchRequest `json:"bench,omitempty"`
}

// BenchRequest says where the default workbench's tree goes and what its name is made
// of besides the guest's package-state digest, which the helper reads (Dir).
type BenchRequest struct {
	// Trees is the trees dir (bring-up's treesRoot).
	Trees string `json:"trees"`
	// Mounts are the bench containers' mount destinations, sorted: made in the tree, and
	// part of its name.
	Mounts []string `json:"mounts"`
	// LevDigest is the hex sha256 of lev's binary (the helper's own executable, which
	// bring-up checked and sent and has hashed already: the helper does not hash its
	// 21 MiB again), part of the workbench's ref.
	LevDigest string `json:"lev_digest"`
}

// Dir is the workbench's tree for a package-state digest: the name bring-up computes
// from the digest its observation read (Instance.benchTree), so a warm bring-up finds by
// name, with no guest call, the tree the helper made.
func (b BenchRequest) Dir(statusSum string) string {
	return filepath.Join(b.Trees, levimage.TreeName("bench", b.ref(statusSum), b.Mounts))
}

func (b BenchRequest) ref(statusSum string) string {
	return levimage.WorkbenchRef(levimage.DebianBase, statusSum, b.LevDigest)
}

// Response is the helper's answer on stdout.
type Response struct {
	Lev   *LevTree   `json:"lev,omitempty"`
	Bench *BenchTree `json:"bench,omitempty"`
}

// LevTree is lev's tree made, or found whole (Found: a guest that kept it, such as one
// restarted after lever stop, whose observation could not look before the boot). Found,
// not "made": an answer without the field (a lev older than the host's lever) reads as a
// tree made, which over-reports a change rather than hiding one.
type LevTree struct {
	Found bool          `json:"found,omitempty"`
	Build time.Duration `json:"build_ns"`
}

// BenchTree is the workbench's tree made, or found whole (no entries), or why the guest
// cannot have one (NoDpkg).
type BenchTree struct {
	// NoDpkg, when not "", is why the guest has no dpkg database: nothing was read or
	// made for the workbench.
	NoDpkg string `json:"no_dpkg,omitempty"`
	// Dir is the tree, named by Ref (the workbench's ref) and StatusSum (the guest's
	// package-state digest, read by the helper: BenchRequest.Dir); Packages is how many
	// packages it was made from (0 when it was found whole).
	Dir       string `json:"dir,omitempty"`
	Ref       string `json:"ref,omitempty"`
	StatusSum string `json:"status_sum,omitempty"`
	Packages  int    `json:"packages,omitempty"`
	levimage.RootDirStats
	// Read is how long reading the guest's package state and files and planning took.
	Read  time.Duration `json:"read_ns"`
	Build time.Duration `json:"build_ns"`
}

// Serve reads a Request on r, makes what it asks for and writes a Response.
func Serve(r io.Reader, w io.Writer) error { return serve(r, w, "/") }

// serve is Serve with the guest's packages read under root (a test's fake root).
func serve(r io.Reader, w io.Writer, root string) error {
	var req Request
	dec := json.NewDecoder(io.LimitReader(r, MaxRequest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return fmt.Errorf("reading the image request: %w", err)
	}
	if err := req.check(); err != nil {
		return fmt.Errorf("image request: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the helper's own binary: %w", err)
	}
	// lev's layer is read once, when a tree is to be made, and its /lev written once: a
	// second tree hard-links the first's
	var layer *levimage.LevLayer
	lev := func() (*levimage.LevLayer, error) {
		if layer != nil {
			return layer, nil
		}
		certs, err := guestCABundle(root)
		if err != nil {
			return nil, err
		}
		if layer, err = levimage.ReadLevLayer(self, certs...); err == nil {
			// In a VM the helper runs lever's installed copy, which never changes: the
			// trees link it rather than write 21 MiB again (under TCG, a second or more).
			layer.LinkFrom(self, levimage.InstalledLevDir)
		}
		return layer, err
	}
	var resp Response
	if req.LevDir != "" {
		t0 := time.Now()
		if err := rootOwnedDirs(filepath.Dir(req.LevDir)); err != nil {
			return err
		}
		l, err := lev()
		if err != nil {
			return err
		}
		made, err := levimage.MakeLevRootDir(l, req.LevDir, req.LevMounts)
		if err != nil {
			return fmt.Errorf("making lev's tree %s: %w", req.LevDir, err)
		}
		resp.Lev = &LevTree{Found: !made, Build: time.Since(t0)}
	}
	if req.Bench != nil {
		t0 := time.Now()
		b, err := makeBench(root, *req.Bench, lev)
		if err != nil {
			return err
		}
		b.Build = time.Since(t0)
		resp.Bench = b
	}
	return json.NewEncoder(w).Encode(resp)
}

// guestCABundle is the guest's CA roots (levimage.CABundle under root) for lev's tree,
// or none when the guest has no ca-certificates package: lev then still runs, and only
// its HTTPS calls fail to verify. It is read as the guest has it at bring-up: a tree
// found whole keeps the roots it was made with (its name is lev's, not the bundle's).
func guestCABundle(root string) ([]string, error) {
	p := filepath.Join(root, levimage.CABundle)
	fi, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the guest's CA roots: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("the guest's CA roots %s: not a regular file", p)
	}
	return []string{p}, nil
}

// makeBench finds the workbench's tree named by the guest's package-state digest, or
// reads the guest's packages, plans the tree and makes it.
func makeBench(root string, req BenchRequest, lev func() (*levimage.LevLayer, error)) (*BenchTree, error) {
	if err := rootOwnedDirs(req.Trees); err != nil {
		return nil, err
	}
	t0 := time.Now()
	sum, err := debroot.StateDigest(root)
	if err != nil {
		return nil, fmt.Errorf("reading the guest's package state: %w", err)
	}
	if sum == "" {
		return &BenchTree{NoDpkg: debroot.ErrNoDpkg.Error()}, nil
	}
	// there whole (trees are renamed into place when whole): nothing more to read
	if dir := req.Dir(sum); exists(dir) {
		return &BenchTree{Dir: dir, Ref: req.ref(sum), StatusSum: sum}, nil
	}
	// only the workbench's packages' file lists are read, not the guest's few hundred
	in, plan, err := debroot.PlanRoot(root, levimage.WorkbenchPackages)
	if errors.Is(err, debroot.ErrNoDpkg) {
		return &BenchTree{NoDpkg: err.Error()}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("planning the workbench: %w", err)
	}
	// named by the digest of the status just read (the same bytes the plan is made of)
	b := &BenchTree{Dir: req.Dir(in.StatusSum), Ref: req.ref(in.StatusSum), StatusSum: in.StatusSum, Packages: len(plan.Packages), Read: time.Since(t0)}
	l, err := lev()
	if err != nil {
		return nil, err
	}
	if b.RootDirStats, err = levimage.MakeRootDir(root, plan.Paths, l, b.Dir, req.Mounts); err != nil {
		return nil, fmt.Errorf("making the workbench tree %s: %w", b.Dir, err)
	}
	return b, nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// check refuses a request before anything is read or made: every path clean and
// absolute, every mount list sorted without repeats (the bench's is part of its tree's
// name), the lev digest a sha256 in hex.
func (req Request) check() error {
	switch {
	case req.LevDir == "" && req.Bench == nil:
		return fmt.Errorf("asks for nothing")
	case req.LevDir != "" && !clean(req.LevDir):
		return fmt.Errorf("lev's tree %q must be a clean absolute path", req.LevDir)
	case req.LevDir == "" && len(req.LevMounts) > 0:
		return fmt.Errorf("lev's mounts without lev's tree")
	}
	if err := checkMounts("lev's", req.LevMounts); err != nil {
		return err
	}
	b := req.Bench
	if b == nil {
		return nil
	}
	switch {
	case !clean(b.Trees) || b.Trees == "/":
		return fmt.Errorf("the workbench's trees dir %q must be a clean absolute path below /", b.Trees)
	case len(b.Mounts) == 0:
		return fmt.Errorf("the workbench's mounts are missing")
	case !isHexSum(b.LevDigest):
		return fmt.Errorf("the lev digest %q is not a hex sha256", b.LevDigest)
	}
	return checkMounts("the workbench's", b.Mounts)
}

func clean(p string) bool { return filepath.IsAbs(p) && filepath.Clean(p) == p }

func checkMounts(whose string, mounts []string) error {
	for i, m := range mounts {
		if !clean(m) || m == "/" {
			return fmt.Errorf("%s mount %q must be a clean absolute path below /", whose, m)
		}
		if i > 0 && mounts[i-1] >= m {
			return fmt.Errorf("%s mounts must be sorted, each once (%q before %q)", whose, mounts[i-1], m)
		}
	}
	return nil
}

// isHexSum: 64 lowercase hex digits.
func isHexSum(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

// rootOwnedDirs makes dir (and what is missing above it) as root, mode 0755, and refuses
// a path on which anyone but root could rename, replace or write: every existing
// component must be a directory (not a symlink) owned by root and writable by no one else
// (a sticky directory such as /tmp may be on the way, as its entries are safe from
// others; dir itself, where the trees' names are listed, may not).
func rootOwnedDirs(dir string) error {
	cur := "/"
	parts := strings.Split(strings.TrimPrefix(dir, "/"), "/")
	for i, part := range parts {
		if part == "" {
			continue
		}
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if os.IsNotExist(err) {
			err = os.Mkdir(cur, 0o755)
			if err == nil {
				if err := os.Chmod(cur, 0o755); err != nil {
					return err
				}
				continue
			}
			if !os.IsExist(err) {
				return fmt.Errorf("making %s: %w", cur, err)
			}
			// made meanwhile (the enrol helper makes the instance's dir too): judge it
			if fi, err = os.Lstat(cur); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		sys, _ := fi.Sys().(*syscall.Stat_t)
		writable := fi.Mode().Perm()&0o022 != 0 && (fi.Mode()&os.ModeSticky == 0 || i == len(parts)-1)
		if !fi.IsDir() || sys == nil || sys.Uid != 0 || writable {
			return fmt.Errorf("lever's trees go under %s, which is not a root-owned directory only root can write (mode %s): refusing", cur, fi.Mode())
		}
	}
	return nil
}
