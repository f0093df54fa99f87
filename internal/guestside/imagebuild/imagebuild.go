// Package imagebuild is the guest side of bring-up's image step: started as root in the
// guest as `lev __guest images`, it makes what lever's containers run from where they run,
// so nothing large crosses the guest link. The lev image is built from the helper's own
// executable, which is exactly the lev binary lever checked and sent (levimage's
// reproducible assembly: the host checks the tag), and loaded into the run user's podman
// there. The default workbench is not an image at all: a directory tree of the guest's own
// package files as the host planned them (levimage.MakeRootDir), which podman runs as an
// overlaid root file system; under qemu's TCG, packing, loading and ID-mapping its 150 MiB
// as an image took two minutes.
//
// It must not import the podman bindings, a backend or anything host-only: lev links it.
package imagebuild

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lever-jail/lever/internal/guestside/runas"
	"github.com/lever-jail/lever/internal/levimage"
)

// MaxRequest bounds the request (the workbench's path list is the bulk: ~10k paths).
const MaxRequest = 32 << 20

// Request is what the helper reads on stdin.
type Request struct {
	UID    int    `json:"uid"`    // the run user, whose podman gets the images
	Socket string `json:"socket"` // that user's podman socket in the guest
	// Lev: build and load the lev image for Arch (GOARCH spelling), which must come out
	// tagged LevRef.
	Lev    bool   `json:"lev,omitempty"`
	Arch   string `json:"arch,omitempty"`
	LevRef string `json:"lev_ref,omitempty"`
	// BenchDir: make the default workbench's tree there (absolute; its parent must be
	// root's, made by the helper when missing) from these paths (debroot.Plan.Paths,
	// relative to Root).
	BenchDir string `json:"bench_dir,omitempty"`
	// Mounts are the bench containers' mount destinations, made in the tree.
	Mounts []string `json:"mounts,omitempty"`
	Root   string   `json:"root,omitempty"`
	Paths  []string `json:"paths,omitempty"`
}

// Response is the helper's answer on stdout.
type Response struct {
	Lev   *Loaded    `json:"lev,omitempty"`
	Bench *BenchTree `json:"bench,omitempty"`
}

// Loaded is one image built and loaded.
type Loaded struct {
	Names        []string `json:"names"`
	ArchiveBytes int      `json:"archive_bytes"`
	// Build and Load are how long each part took in the guest.
	Build time.Duration `json:"build_ns"`
	Load  time.Duration `json:"load_ns"`
}

// BenchTree is the workbench's tree made (or found whole: no entries).
type BenchTree struct {
	levimage.RootDirStats
	Build time.Duration `json:"build_ns"`
}

// Serve reads a Request on r, builds and loads what it asks for and writes a Response.
func Serve(r io.Reader, w io.Writer) error {
	var req Request
	dec := json.NewDecoder(io.LimitReader(r, MaxRequest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return fmt.Errorf("reading the image request: %w", err)
	}
	switch {
	case !req.Lev && req.BenchDir == "":
		return fmt.Errorf("image request asks for no image")
	case req.BenchDir != "" && (req.Root == "" || len(req.Paths) == 0):
		return fmt.Errorf("image request: a workbench needs a root and paths")
	case req.BenchDir != "" && (!filepath.IsAbs(req.Root) || !filepath.IsAbs(req.BenchDir) || filepath.Clean(req.BenchDir) != req.BenchDir):
		return fmt.Errorf("image request: the workbench's root %q and dir %q must be clean absolute paths", req.Root, req.BenchDir)
	case req.Lev && req.LevRef == "":
		return fmt.Errorf("image request: the lev image needs its ref")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the helper's own binary: %w", err)
	}
	var resp Response
	// The tree while still root: the package files are root's to read and link, and the
	// tree is root's, out of the run user's reach.
	if req.BenchDir != "" {
		t0 := time.Now()
		if err := rootOwnedDirs(filepath.Dir(req.BenchDir)); err != nil {
			return err
		}
		st, err := levimage.MakeRootDir(req.Root, req.Paths, self, req.BenchDir, req.Mounts)
		if err != nil {
			return fmt.Errorf("making the workbench tree %s: %w", req.BenchDir, err)
		}
		resp.Bench = &BenchTree{RootDirStats: st, Build: time.Since(t0)}
	}
	if !req.Lev {
		return json.NewEncoder(w).Encode(resp)
	}
	t0 := time.Now()
	im, err := levimage.Build(levimage.Spec{LevBinary: self, Arch: req.Arch})
	if err != nil {
		return err
	}
	if im.Ref != req.LevRef {
		return fmt.Errorf("the lev image built in the guest is %s, but lever expects %s: the helper is not the lev lever built the image from", im.Ref, req.LevRef)
	}
	build := time.Since(t0)
	// The socket lives in the run user's runtime dir, which that user controls (a
	// symlink there could point root's connection at rootful podman): connect as them.
	if err := runas.Become(req.UID); err != nil {
		return err
	}
	t0 = time.Now()
	names, err := load(req.Socket, im.Archive)
	if err != nil {
		return err
	}
	resp.Lev = &Loaded{Names: names, ArchiveBytes: len(im.Archive), Build: build, Load: time.Since(t0)}
	return json.NewEncoder(w).Encode(resp)
}

// rootOwnedDirs makes dir (and what is missing above it) as root, mode 0755, and refuses
// a path on which anyone but root could rename, replace or write: every existing
// component must be a directory (not a symlink) owned by root and writable by no one else
// (a sticky directory such as /tmp may be, as its entries are safe from others).
func rootOwnedDirs(dir string) error {
	cur := "/"
	for _, part := range strings.Split(strings.TrimPrefix(dir, "/"), "/") {
		if part == "" {
			continue
		}
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if os.IsNotExist(err) {
			if err := os.Mkdir(cur, 0o755); err != nil {
				return fmt.Errorf("making %s: %w", cur, err)
			}
			if err := os.Chmod(cur, 0o755); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		sys, _ := fi.Sys().(*syscall.Stat_t)
		writable := fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0
		if !fi.IsDir() || sys == nil || sys.Uid != 0 || writable {
			return fmt.Errorf("the workbench's tree goes under %s, which is not a root-owned directory only root can write (mode %s): refusing", cur, fi.Mode())
		}
	}
	return nil
}

// load posts a docker-archive to podman's image-load endpoint on the unix socket and
// returns the names it loaded.
func load(socket string, archive []byte) ([]string, error) {
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
	// v4.0.0: the oldest libpod API lever supports (Debian 12's podman 4.3 serves it;
	// podman 5 still does).
	resp, err := c.Post("http://podman/v4.0.0/libpod/images/load", "application/x-tar", bytes.NewReader(archive))
	if err != nil {
		return nil, fmt.Errorf("loading an image into the run user's podman at %s: %w", socket, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &e) == nil && e.Message != "" {
			return nil, fmt.Errorf("the run user's podman refused the image: %s", e.Message)
		}
		return nil, fmt.Errorf("the run user's podman refused the image: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var out struct {
		Names []string `json:"Names"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("reading podman's answer to the image load: %w (%q)", err, body)
	}
	return out.Names, nil
}
