// Package imagebuild is the guest side of bring-up's image step: started as root in the
// guest as `lev __guest images`, it builds lever's images where they will run and loads
// them into the run user's podman there, so their bytes never cross the guest link (under
// qemu's TCG the workbench's 150 MiB took over a minute to pack, copy out over ssh and
// load back in over the forwarded socket). The lev image is built from the helper's own
// executable, which is exactly the lev binary lever checked and sent; the workbench from
// the guest's own package files, as the host planned them. The images are the same bytes
// the host would build (levimage's reproducible assembly), and the host checks the tags.
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
	// Bench: build the default workbench from these paths (debroot.Plan.Paths, relative
	// to Root) and load it tagged BenchRef.
	Bench    bool     `json:"bench,omitempty"`
	BenchRef string   `json:"bench_ref,omitempty"`
	DpkgArch string   `json:"dpkg_arch,omitempty"` // dpkg's architecture, as the gather read it
	Root     string   `json:"root,omitempty"`
	Paths    []string `json:"paths,omitempty"`
}

// Response is the helper's answer on stdout.
type Response struct {
	Lev   *Loaded `json:"lev,omitempty"`
	Bench *Loaded `json:"bench,omitempty"`
}

// Loaded is one image built and loaded.
type Loaded struct {
	Names        []string            `json:"names"`
	ArchiveBytes int                 `json:"archive_bytes"`
	Layer        levimage.LayerStats `json:"layer"` // the workbench's base layer
	// Build and Load are how long each part took in the guest.
	Build time.Duration `json:"build_ns"`
	Load  time.Duration `json:"load_ns"`
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
	case !req.Lev && !req.Bench:
		return fmt.Errorf("image request asks for no image")
	case req.Bench && (req.Root == "" || len(req.Paths) == 0 || req.BenchRef == ""):
		return fmt.Errorf("image request: a workbench needs a root, paths and a ref")
	case req.Bench && !filepath.IsAbs(req.Root):
		return fmt.Errorf("image request: the workbench's root must be absolute, not %q", req.Root)
	case req.Lev && req.LevRef == "":
		return fmt.Errorf("image request: the lev image needs its ref")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the helper's own binary: %w", err)
	}
	// Build while still root: the package files are root's to read, as the guest's tar
	// read them before.
	type built struct {
		im    *levimage.Image
		st    levimage.LayerStats
		build time.Duration
	}
	var lev, bench *built
	if req.Lev {
		t0 := time.Now()
		im, err := levimage.Build(levimage.Spec{LevBinary: self, Arch: req.Arch})
		if err != nil {
			return err
		}
		if im.Ref != req.LevRef {
			return fmt.Errorf("the lev image built in the guest is %s, but lever expects %s: the helper is not the lev lever built the image from", im.Ref, req.LevRef)
		}
		lev = &built{im: im, build: time.Since(t0)}
	}
	if req.Bench {
		t0 := time.Now()
		layer, st, err := levimage.LayerFromFS(req.Root, req.Paths)
		if err != nil {
			return fmt.Errorf("making the workbench layer: %w", err)
		}
		im, err := levimage.BuildWorkbench(self, layer, req.BenchRef, req.DpkgArch)
		if err != nil {
			return err
		}
		bench = &built{im: im, st: st, build: time.Since(t0)}
	}
	// The socket lives in the run user's runtime dir, which that user controls (a
	// symlink there could point root's connection at rootful podman): connect as them.
	if err := runas.Become(req.UID); err != nil {
		return err
	}
	var resp Response
	for _, b := range []struct {
		in  *built
		out **Loaded
	}{{lev, &resp.Lev}, {bench, &resp.Bench}} {
		if b.in == nil {
			continue
		}
		t0 := time.Now()
		names, err := load(req.Socket, b.in.im.Archive)
		if err != nil {
			return err
		}
		*b.out = &Loaded{Names: names, ArchiveBytes: len(b.in.im.Archive), Layer: b.in.st, Build: b.in.build, Load: time.Since(t0)}
		b.in.im = nil // the archive can go before the next one is loaded
	}
	return json.NewEncoder(w).Encode(resp)
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
