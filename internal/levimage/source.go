package levimage

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/lever-jail/lever/internal/config"
)

// Kind says where the lev image comes from.
type Kind string

const (
	// Built: lever builds it from the static lev binary.
	Built Kind = "built"
	// Configured: lev.image names an image the guest's podman already holds.
	Configured Kind = "image"
	// Tarball: lev.image_tarball is a docker-archive or oci-archive on the host.
	Tarball Kind = "tarball"
)

// Source is the resolved choice of lev image for an instance.
type Source struct {
	Kind Kind
	// Ref is the image reference (Configured), or empty until built/loaded.
	Ref string
	// Path is the tarball (Tarball) or the lev binary (Built).
	Path string
}

// Resolve picks the image source from lever.yaml: image, then image_tarball, else a build
// from the lev binary (levBinary, found by FindLevBinary when empty) for a guest of arch.
func Resolve(cfg *config.Config, levBinary, arch string) (Source, error) {
	switch {
	case cfg.Lev.Image != "" && cfg.Lev.ImageTarball != "":
		return Source{}, fmt.Errorf("lev.image and lev.image_tarball are both set; choose one")
	case cfg.Lev.Image != "":
		return Source{Kind: Configured, Ref: cfg.Lev.Image}, nil
	case cfg.Lev.ImageTarball != "":
		p := cfg.Lev.ImageTarball
		if !filepath.IsAbs(p) {
			p = filepath.Join(cfg.Dir, p)
		}
		if _, err := os.Stat(p); err != nil {
			return Source{}, fmt.Errorf("lev.image_tarball: %w", err)
		}
		return Source{Kind: Tarball, Path: p}, nil
	}
	if levBinary == "" {
		var err error
		if levBinary, err = FindLevBinary(arch); err != nil {
			return Source{}, err
		}
	}
	if err := CheckStatic(levBinary, arch); err != nil {
		return Source{}, err
	}
	return Source{Kind: Built, Path: levBinary}, nil
}
