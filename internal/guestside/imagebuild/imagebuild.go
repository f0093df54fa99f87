// Package imagebuild is the guest side of bring-up's image step: started as root in the
// guest as `lev __guest images`, it makes what lever's containers run, where they run,
// as directory trees that podman runs as overlaid root file systems (--rootfs dir:O):
// lev's tree (levimage.MakeLevRootDir: the helper's own executable, exactly the lev binary
// lever checked and sent) and the default workbench's (levimage.MakeRootDir: the guest's
// own package files as the host planned them). Nothing large crosses the guest link and
// nothing is packed, loaded or ID-mapped: under qemu's TCG the images these replace took
// two minutes to build and load.
//
// It never talks to podman: the trees are root's, made as root under root-owned
// directories, and the containers name them. It must not import the podman bindings, a
// backend or anything host-only: lev links it.
package imagebuild

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lever-jail/lever/internal/levimage"
)

// MaxRequest bounds the request (the workbench's path list is the bulk: ~10k paths).
const MaxRequest = 32 << 20

// Request is what the helper reads on stdin. Every directory is absolute and clean; the
// parent of each must be root's (made by the helper when missing).
type Request struct {
	// LevDir: make lev's tree there, with the lev containers' mount destinations.
	LevDir    string   `json:"lev_dir,omitempty"`
	LevMounts []string `json:"lev_mounts,omitempty"`
	// BenchDir: make the default workbench's tree there from these paths
	// (debroot.Plan.Paths, relative to Root), with the bench containers' mount
	// destinations.
	BenchDir    string   `json:"bench_dir,omitempty"`
	BenchMounts []string `json:"bench_mounts,omitempty"`
	Root        string   `json:"root,omitempty"`
	Paths       []string `json:"paths,omitempty"`
}

// Response is the helper's answer on stdout.
type Response struct {
	Lev   *LevTree   `json:"lev,omitempty"`
	Bench *BenchTree `json:"bench,omitempty"`
}

// LevTree is lev's tree made (or found whole).
type LevTree struct {
	Build time.Duration `json:"build_ns"`
}

// BenchTree is the workbench's tree made (or found whole: no entries).
type BenchTree struct {
	levimage.RootDirStats
	Build time.Duration `json:"build_ns"`
}

// Serve reads a Request on r, makes what it asks for and writes a Response.
func Serve(r io.Reader, w io.Writer) error {
	var req Request
	dec := json.NewDecoder(io.LimitReader(r, MaxRequest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return fmt.Errorf("reading the image request: %w", err)
	}
	clean := func(p string) bool { return filepath.IsAbs(p) && filepath.Clean(p) == p }
	switch {
	case req.LevDir == "" && req.BenchDir == "":
		return fmt.Errorf("image request asks for nothing")
	case req.LevDir != "" && !clean(req.LevDir):
		return fmt.Errorf("image request: lev's tree %q must be a clean absolute path", req.LevDir)
	case req.BenchDir != "" && (req.Root == "" || len(req.Paths) == 0):
		return fmt.Errorf("image request: a workbench needs a root and paths")
	case req.BenchDir != "" && (!clean(req.Root) || !clean(req.BenchDir)):
		return fmt.Errorf("image request: the workbench's root %q and dir %q must be clean absolute paths", req.Root, req.BenchDir)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the helper's own binary: %w", err)
	}
	var resp Response
	if req.LevDir != "" {
		t0 := time.Now()
		if err := rootOwnedDirs(filepath.Dir(req.LevDir)); err != nil {
			return err
		}
		if err := levimage.MakeLevRootDir(self, req.LevDir, req.LevMounts); err != nil {
			return fmt.Errorf("making lev's tree %s: %w", req.LevDir, err)
		}
		resp.Lev = &LevTree{Build: time.Since(t0)}
	}
	if req.BenchDir != "" {
		t0 := time.Now()
		if err := rootOwnedDirs(filepath.Dir(req.BenchDir)); err != nil {
			return err
		}
		st, err := levimage.MakeRootDir(req.Root, req.Paths, self, req.BenchDir, req.BenchMounts)
		if err != nil {
			return fmt.Errorf("making the workbench tree %s: %w", req.BenchDir, err)
		}
		resp.Bench = &BenchTree{RootDirStats: st, Build: time.Since(t0)}
	}
	return json.NewEncoder(w).Encode(resp)
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
