package bringup

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/levimage"
)

// imageStep makes both images present: the lev image (the lev containers) and the
// workbench (the agents' tools), each built or loaded once and found by its content tag
// afterwards. Skipped (no guest call, no image write) when the observation found both.
var imageStep = Step{
	ID:    StepImage,
	Needs: []Fact{FactUID, FactStatusSum, FactImageRef},
	// podman only for an image (a configured or loaded lev image, a workbench on a user's
	// base); lever's trees are made by the guest helper alone.
	NeedsFor: func(in *Instance) []Fact {
		if in.usesImages() {
			return []Fact{FactPodman}
		}
		return nil
	},
	Gives: []Fact{FactImageRef, FactBenchRef, FactStatusSum},
	// The slowest step of a cold up (the trees made in the guest): with lever's trees it
	// starts as soon as provisioning is done and runs beside broker, podman and enrol,
	// which neither need nor change anything it uses.
	Overlap: true,
	Plan: func(p PlanInput) (Action, string) {
		switch o := p.Obs; {
		case o.ImagePresent && o.BenchPresent:
			return ActionKeep, o.ImageRef + " and workbench " + o.BenchRef + " are loaded"
		case o.ImagePresent:
			bench := o.BenchRef
			if bench == "" {
				bench = "(tag decided from the guest's packages)"
			}
			return ActionCreate, "build the workbench " + bench
		default:
			return ActionCreate, "load " + o.ImageRef + " and the workbench"
		}
	},
	Run: func(ctx context.Context, in *Instance, obs Observed, f Facts) (Done, error) {
		if f.Podman == nil && in.usesImages() {
			return Done{Facts: f}, fmt.Errorf("no connection to the run user's podman")
		}
		t0 := time.Now()
		levDir, ch1, d1, f, err := in.stepLevImage(f.Podman, obs, f)
		if err != nil {
			return Done{Facts: f}, err
		}
		if ch1 {
			d1 += " in " + round(time.Since(t0))
		}
		ch2, d2, bench, f, err := in.ensureBench(ctx, f.Podman, obs, f)
		if err != nil {
			return Done{Facts: f}, fmt.Errorf("workbench: %w", err)
		}
		var parts []string
		for _, d := range []string{d1, d2} {
			if d != "" {
				parts = append(parts, d)
			}
		}
		// lever's own lev and the default workbench are trees made in the guest, both in
		// one helper call, which reads the guest's packages itself: the workbench's ref
		// and the package-state digest come back in its answer.
		if levDir != "" || bench != nil {
			lines, made, f2, err := in.buildInGuest(ctx, levDir, bench, f)
			if err != nil {
				if bench != nil {
					err = fmt.Errorf("workbench: %w", err)
				}
				return Done{Facts: f}, err
			}
			f = f2
			parts = append(parts, lines...)
			// a tree the helper found in place (the workbench, after provisioning
			// cleared the observed digest) is no change
			ch2 = ch2 || made
		}
		return Done{Changed: ch1 || ch2, Detail: strings.Join(parts, "; "), Facts: f}, nil
	},
}

// stepLevImage makes the lev image present: a configured one is checked, a tarball is
// loaded from the host; lever's own lev is a tree, returned as levDir for the guest to
// make when the observation did not list it. The facts it returns name the image.
func (in *Instance) stepLevImage(c Images, obs Observed, f Facts) (levDir string, changed bool, detail string, _ Facts, _ error) {
	switch in.source.Kind {
	case levimage.Configured:
		ok, err := c.ImageExists(in.imageRef)
		if err != nil {
			return "", false, "", f, err
		}
		if !ok {
			return "", false, "", f, fmt.Errorf("lev.image %s is not in the run user's podman (no registry is used); load it or set lev.image_tarball", in.imageRef)
		}
		return "", false, in.imageRef + " present", f, nil
	case levimage.Tarball:
		data, err := os.ReadFile(in.source.Path)
		if err != nil {
			return "", false, "", f, err
		}
		sum := sha256.Sum256(data)
		marker := filepath.Join(in.cfg.StateDir(), "guest", fmt.Sprintf("image-%x.ref", sum[:8]))
		if ref, err := os.ReadFile(marker); err == nil {
			if ok, _ := c.ImageExists(string(ref)); ok {
				f.ImageRef = string(ref)
				return "", false, f.ImageRef + " present", f, nil
			}
		}
		names, err := c.LoadArchive(data)
		if err != nil {
			return "", false, "", f, err
		}
		if len(names) == 0 {
			return "", false, "", f, fmt.Errorf("lev.image_tarball %s loaded no image", in.source.Path)
		}
		f.ImageRef = names[0]
		os.MkdirAll(filepath.Dir(marker), 0o700)
		os.WriteFile(marker, []byte(f.ImageRef), 0o600)
		return "", true, "loaded " + f.ImageRef, f, nil
	}
	dir := in.levTree()
	if obs.Trees[filepath.Base(dir)] {
		return "", false, "lev's tree " + dir + " present", f, nil
	}
	return dir, false, "", f, nil
}

// usesImages says whether the image step works with podman images: a configured or
// tarball lev image, or a workbench on a user's base. Lever's own lev and the default
// workbench are trees, made without podman.
func (in *Instance) usesImages() bool {
	return in.source.Kind != levimage.Built || in.benchBase() != baseDebian
}

// usesTrees says whether the image step may make a tree in the guest (with the image
// helper): lever's own lev, or the default workbench.
func (in *Instance) usesTrees() bool {
	return in.source.Kind == levimage.Built || in.benchBase() == baseDebian
}
