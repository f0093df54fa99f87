// Package levimage builds the image lev runs from inside the jail, with no registry: a
// docker-archive tarball assembled by hand from the static lev binary, byte-for-byte
// reproducible so that the image's tag (derived from its config digest) says whether the
// guest already holds exactly this image. It also picks the lev binary for the guest's
// architecture and plans the workbench image. It builds images; it must not load or run
// them (internal/containers does) nor pull from any registry.
package levimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Repo is the local repository name lever's built images carry in the guest's podman.
const Repo = "localhost/lever/lev"

// epoch is every timestamp in the image: a fixed value keeps the digest a function of the
// inputs only.
var epoch = time.Unix(0, 0).UTC()

// CABundle is where a Debian system (the guest, or the host on the netns substrate) keeps
// its CA roots as one PEM file (package ca-certificates), and where Go's crypto/x509 looks
// first on Linux: lev's tree gets the guest's copy at the same path, so lev's web_fetch,
// http_get and http_post verify public HTTPS (with none, every HTTPS call fails with
// "certificate signed by unknown authority").
const CABundle = "/etc/ssl/certs/ca-certificates.crt"

// Spec is what goes into a built image.
type Spec struct {
	// LevBinary is the host path of the static lev binary; it becomes /lev.
	LevBinary string
	// CACerts are extra PEM files placed under /etc/ssl/certs (the broker's CA is not one
	// of them: lev gets that through its enrolment mount, so rotating it needs no rebuild).
	CACerts []string
	// Arch is the OCI architecture (the guest's); the lev binary must be built for it.
	// Empty means the lev binary's own.
	Arch string
}

// Image is a built docker-archive.
type Image struct {
	// Ref is the reference the archive tags, Repo:<12 hex of the config digest>.
	Ref string
	// ConfigDigest is "sha256:<hex>" of the image config, which podman reports as the
	// image ID.
	ConfigDigest string
	// Archive is the docker-archive tarball.
	Archive []byte
}

// CheckStatic refuses a lev binary that is not a static Linux ELF executable for the
// guest's architecture arch (GOARCH spelling): the image has no libc or loader, so a
// dynamic binary would fail only at container start, far from the cause, and a binary of
// the other architecture (or a Mac's lev) would fail only in the guest. The error names
// the path, what it is, and what the guest needs.
func CheckStatic(path, arch string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("lev binary %s: not an ELF executable: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("lev binary %s is dynamically linked (has an ELF interpreter); build it with CGO_ENABLED=0", path)
		}
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("lev binary %s: ELF type %v is not an executable", path, f.Type)
	}
	got, err := ELFArch(path)
	if err != nil {
		return err
	}
	if got != arch {
		return fmt.Errorf("lev binary %s is built for linux/%s; the guest is linux/%s (use a lev built with GOOS=linux GOARCH=%s, e.g. %s from make build or a release archive)", path, got, arch, arch, ArchName(arch))
	}
	return nil
}

// Build assembles the image. The same inputs give the same bytes.
func Build(s Spec) (*Image, error) {
	arch := s.Arch
	if arch == "" {
		// The image is for the architecture its lev is built for.
		a, err := ELFArch(s.LevBinary)
		if err != nil {
			return nil, err
		}
		arch = a
	}
	if err := CheckStatic(s.LevBinary, arch); err != nil {
		return nil, err
	}
	layer, err := rootfs(s)
	if err != nil {
		return nil, err
	}
	rc := runConfig{
		Entrypoint: []string{"/lev"},
		Cmd:        []string{"serve"},
		Env:        []string{"PATH=/", "HOME=/tmp", "SSL_CERT_DIR=/etc/ssl/certs"},
		WorkingDir: "/lever",
		Labels:     map[string]string{"io.lever.role": "lev"},
	}
	return assemble(arch, rc, [][]byte{layer}, []string{"lever levimage.Build"}, func(cfgHex string) string {
		return Repo + ":" + cfgHex[:12]
	})
}

// assemble writes a docker-archive of layers (bottom first) under the config rc; tag
// names the image from its config digest's hex.
func assemble(arch string, rc runConfig, layers [][]byte, createdBy []string, tag func(cfgHex string) string) (*Image, error) {
	cfg := imageConfig{
		Created:      epoch.Format(time.RFC3339),
		Architecture: arch,
		OS:           "linux",
		Config:       rc,
		RootFS:       rootFS{Type: "layers"},
	}
	var layerHexes []string
	for i, l := range layers {
		sum := sha256.Sum256(l)
		h := hex.EncodeToString(sum[:])
		layerHexes = append(layerHexes, h)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, "sha256:"+h)
		cfg.History = append(cfg.History, history{Created: epoch.Format(time.RFC3339), CreatedBy: createdBy[i]})
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding image config: %w", err)
	}
	cfgSum := sha256.Sum256(cfgJSON)
	cfgHex := hex.EncodeToString(cfgSum[:])
	ref := tag(cfgHex)
	entry := manifestEntry{Config: cfgHex + ".json", RepoTags: []string{ref}}
	for _, h := range layerHexes {
		entry.Layers = append(entry.Layers, h+"/layer.tar")
	}
	manJSON, err := json.Marshal([]manifestEntry{entry})
	if err != nil {
		return nil, fmt.Errorf("encoding manifest: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	for i, h := range layerHexes {
		if seen[h] {
			continue
		}
		seen[h] = true
		if err := writeFile(tw, h+"/layer.tar", 0o644, layers[i]); err != nil {
			return nil, fmt.Errorf("writing docker-archive layer %s: %w", h, err)
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{cfgHex + ".json", cfgJSON},
		{"manifest.json", manJSON},
	} {
		if err := writeFile(tw, f.name, 0o644, f.data); err != nil {
			return nil, fmt.Errorf("writing docker-archive entry %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("closing docker-archive: %w", err)
	}
	return &Image{Ref: ref, ConfigDigest: "sha256:" + cfgHex, Archive: buf.Bytes()}, nil
}

// rootfs is the single layer: /lev, the directories lev and podman expect, and a passwd
// that names the unprivileged user the container runs as.
func rootfs(s Spec) ([]byte, error) {
	return layerTar(s, true)
}

// layerTar is lev's layer as a tar; without lev, /lev is left out (a tree gets it from
// LevLayer, linked or read only when it must be written).
func layerTar(s Spec, withLev bool) ([]byte, error) {
	var lev []byte
	if withLev {
		var err error
		if lev, err = os.ReadFile(s.LevBinary); err != nil {
			return nil, fmt.Errorf("reading lev binary: %w", err)
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []struct {
		name string
		mode int64
	}{
		{"etc/", 0o755}, {"etc/ssl/", 0o755}, {"etc/ssl/certs/", 0o755},
		{"lever/", 0o755}, {"run/", 0o755}, {"run/lever/", 0o755}, {"tmp/", 0o1777},
	} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, fmt.Errorf("writing %s: %w", d.name, err)
		}
	}
	files := []struct {
		name string
		mode int64
		data []byte
	}{
		{"lev", 0o755, lev},
		{"etc/passwd", 0o644, []byte("root:x:0:0:root:/tmp:/lev\nnobody:x:65534:65534:nobody:/tmp:/lev\n")},
		{"etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")},
	}
	certs := append([]string(nil), s.CACerts...)
	sort.Strings(certs)
	for _, c := range certs {
		data, err := os.ReadFile(c)
		if err != nil {
			return nil, fmt.Errorf("reading CA certificate %s: %w", c, err)
		}
		files = append(files, struct {
			name string
			mode int64
			data []byte
		}{"etc/ssl/certs/" + filepath.Base(c), 0o644, data})
	}
	for _, f := range files {
		if f.name == "lev" && !withLev {
			continue
		}
		if err := writeFile(tw, f.name, f.mode, f.data); err != nil {
			return nil, fmt.Errorf("writing %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err := io.Copy(tw, bytes.NewReader(data))
	return err
}

type imageConfig struct {
	Created      string    `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       runConfig `json:"config"`
	RootFS       rootFS    `json:"rootfs"`
	History      []history `json:"history"`
}

type runConfig struct {
	Entrypoint []string          `json:"Entrypoint"`
	Cmd        []string          `json:"Cmd"`
	Env        []string          `json:"Env"`
	WorkingDir string            `json:"WorkingDir"`
	Labels     map[string]string `json:"Labels"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

type manifestEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}
