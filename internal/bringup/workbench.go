package bringup

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guestside"
	"github.com/lever-jail/lever/internal/guestside/imagebuild"
	"github.com/lever-jail/lever/internal/levimage"
	"github.com/lever-jail/lever/internal/levimage/debroot"
	"github.com/lever-jail/lever/internal/tail"
)

// Workbench bases.
const (
	baseDebian  = "debian"  // made from the guest's own Debian packages
	baseImage   = "image"   // lev.base_image
	baseTarball = "tarball" // lev.base_tarball
)

func (in *Instance) benchBase() string {
	switch {
	case in.cfg.Lev.BaseImage != "":
		return baseImage
	case in.cfg.Lev.BaseTarball != "":
		return baseTarball
	}
	return baseDebian
}

// benchKnownRef is the workbench's content-addressed ref when it can be computed without
// a guest call: from the base image's ID, the tarball's digest, or the dpkg status digest
// the observe call read. "" when it cannot (yet).
func (in *Instance) benchKnownRef(c Images, f Facts) (string, error) {
	if in.levDigest == "" {
		return "", in.levErr
	}
	switch in.benchBase() {
	case baseImage:
		info, err := c.Image(in.cfg.Lev.BaseImage)
		if err != nil {
			return "", fmt.Errorf("lev.base_image %s is not in the run user's podman (no registry is used): load it there first: %w", in.cfg.Lev.BaseImage, err)
		}
		return levimage.WorkbenchRef(baseImage, info.ID, in.levDigest), nil
	case baseTarball:
		if in.tarballErr != nil {
			return "", in.tarballErr
		}
		return levimage.WorkbenchRef(baseTarball, in.tarballDigest, in.levDigest), nil
	}
	if f.StatusSum == "" {
		return "", nil
	}
	return levimage.WorkbenchRef(baseDebian, f.StatusSum, in.levDigest), nil
}

// ensureBench makes the workbench image present: present (no build, no guest call),
// layered onto a user base in the guest's podman, or planned from the guest's packages
// (one guest call reads dpkg's database) and returned for the guest to build
// (buildInGuest). The facts it returns carry the workbench's ref (and the package-state
// digest it read).
func (in *Instance) ensureBench(ctx context.Context, c Images, f Facts) (bool, string, *benchPlan, Facts, error) {
	t0 := time.Now()
	ref, err := in.benchKnownRef(c, f)
	if err != nil {
		return false, "", nil, f, err
	}
	if ref != "" {
		if ok, err := c.ImageExists(ref); err != nil {
			return false, "", nil, f, err
		} else if ok {
			f.BenchRef = ref
			return false, "workbench " + ref + " present" + in.benchSize(c, ref), nil, f, nil
		}
	}
	switch in.benchBase() {
	case baseImage:
		info, err := c.Image(in.cfg.Lev.BaseImage)
		if err != nil {
			return false, "", nil, f, err
		}
		if err := in.layerLev(c, info.ID, ref); err != nil {
			return false, "", nil, f, err
		}
		f.BenchRef = ref
		return true, fmt.Sprintf("workbench %s built on %s in %s%s", ref, in.cfg.Lev.BaseImage, round(time.Since(t0)), in.benchSize(c, ref)), nil, f, nil
	case baseTarball:
		data, err := os.ReadFile(in.cfg.Lev.BaseTarball)
		if err != nil {
			return false, "", nil, f, fmt.Errorf("lev.base_tarball: %w", err)
		}
		names, err := c.LoadArchive(data)
		if err != nil {
			return false, "", nil, f, fmt.Errorf("lev.base_tarball %s: %w", in.cfg.Lev.BaseTarball, err)
		}
		if len(names) == 0 {
			return false, "", nil, f, fmt.Errorf("lev.base_tarball %s loaded no image", in.cfg.Lev.BaseTarball)
		}
		info, err := c.Image(names[0])
		if err != nil {
			return false, "", nil, f, err
		}
		if err := in.layerLev(c, info.ID, ref); err != nil {
			return false, "", nil, f, err
		}
		f.BenchRef = ref
		return true, fmt.Sprintf("workbench %s loaded from %s and built in %s%s", ref, in.cfg.Lev.BaseTarball, round(time.Since(t0)), in.benchSize(c, ref)), nil, f, nil
	}
	plan, f, err := in.planDebianBench(ctx, c, f)
	if err != nil || plan != nil {
		return false, "", plan, f, err
	}
	return false, "workbench " + f.BenchRef + " present" + in.benchSize(c, f.BenchRef), nil, f, nil
}

func (in *Instance) layerLev(c Images, baseID, ref string) error {
	return c.LayerLev(baseID, ref, in.levBin, levimage.BenchCommand[:1], levimage.BenchCommand[1:],
		map[string]string{containers.LabelRole: "bench"}, nil)
}

// benchPlan is a default workbench to build in the guest: the planned files and the tag.
type benchPlan struct {
	ref      string
	paths    []string
	packages int
	dpkgArch string
}

// planDebianBench reads the guest's dpkg database (one call) and plans the workbench's
// files on the host. A nil plan means the tag it computed is already in podman (another
// instance built it, or provisioning changed nothing that matters).
func (in *Instance) planDebianBench(ctx context.Context, c Images, f Facts) (*benchPlan, Facts, error) {
	sc := debroot.Gather()
	res, err := in.Runner.Run(ctx, sc.Cmd(nil))
	if err != nil {
		return nil, f, fmt.Errorf("reading the guest's packages: %w", err)
	}
	if res.ExitCode == 3 {
		return nil, f, fmt.Errorf("the guest has no dpkg database (%s), so lever cannot make the workbench from its packages: set lev.base_image or lev.base_tarball in %s", strings.TrimSpace(string(res.Stderr)), in.cfg.Path)
	}
	if res.ExitCode != 0 {
		return nil, f, fmt.Errorf("reading the guest's packages: exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	secs, err := sc.Parse(res.Stdout)
	if err != nil {
		return nil, f, fmt.Errorf("reading the guest's packages: %w", err)
	}
	gin, err := debroot.ParseGather(secs)
	if err != nil {
		return nil, f, err
	}
	f.StatusSum = gin.StatusSum
	ref := levimage.WorkbenchRef(baseDebian, f.StatusSum, in.levDigest)
	// Provisioning may have just installed what made the status change: the tag may
	// exist all the same (another instance built it).
	if ok, err := c.ImageExists(ref); err == nil && ok {
		f.BenchRef = ref
		return nil, f, nil
	}
	plan, err := debroot.Resolve(gin, levimage.WorkbenchPackages)
	if err != nil {
		return nil, f, fmt.Errorf("planning the workbench: %w", err)
	}
	return &benchPlan{ref: ref, paths: plan.Paths, packages: len(plan.Packages), dpkgArch: gin.Arch}, f, nil
}

// buildInGuest is the image step's one helper call (`lev __guest images`): the lev image
// (levRef, when not "") and the planned workbench (when bench is not nil) are built in
// the guest, from the helper's own lev and the guest's own files, and loaded into the run
// user's podman there; the host then checks podman holds the tags it computed. It returns
// a line per image built.
func (in *Instance) buildInGuest(ctx context.Context, c Images, uid int, levRef string, bench *benchPlan) ([]string, error) {
	req := imagebuild.Request{UID: uid, Socket: containers.SocketPath(uid)}
	if levRef != "" {
		req.Lev, req.LevRef, req.Arch = true, levRef, in.arch
	}
	if bench != nil {
		req.Bench, req.BenchRef, req.Root, req.Paths, req.DpkgArch = true, bench.ref, "/", bench.paths, bench.dpkgArch
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if len(body) > imagebuild.MaxRequest {
		return nil, fmt.Errorf("the image request is %d bytes, over the guest helper's %d", len(body), imagebuild.MaxRequest)
	}
	argv, prefix, err := in.helperArgv(guestside.ModeImages)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	res, err := guest.RunOK(ctx, in.Runner, guest.Cmd{As: guest.Root, Argv: argv, Stdin: append(prefix, body...)})
	if err != nil {
		return nil, fmt.Errorf("building the images in the guest: %w", err)
	}
	var resp imagebuild.Response
	if err := json.Unmarshal(res.Stdout, &resp); err != nil {
		return nil, fmt.Errorf("reading the guest's image helper: %w (%q)", err, tail.Lines(string(res.Stdout), 3, " | "))
	}
	call := time.Since(t0)
	var lines []string
	if levRef != "" {
		if resp.Lev == nil {
			return nil, fmt.Errorf("the guest's image helper did not load the lev image")
		}
		if ok, err := c.ImageExists(levRef); err != nil || !ok {
			return nil, fmt.Errorf("the guest's image helper loaded %v but podman has no %s (%v)", resp.Lev.Names, levRef, err)
		}
		lines = append(lines, fmt.Sprintf("built and loaded %s in the guest (%d KiB; build %s, load %s)", levRef, resp.Lev.ArchiveBytes>>10, round(resp.Lev.Build), round(resp.Lev.Load)))
	}
	if bench != nil {
		b := resp.Bench
		if b == nil {
			return nil, fmt.Errorf("the guest's image helper did not load the workbench")
		}
		if ok, err := c.ImageExists(bench.ref); err != nil || !ok {
			return nil, fmt.Errorf("the guest's image helper loaded %v but podman has no %s (%v)", b.Names, bench.ref, err)
		}
		lines = append(lines, fmt.Sprintf("workbench %s built in the guest from %d of its packages (%d files, %d MiB archive, %d setuid/setgid bits cleared; build %s, load %s; helper call %s)%s",
			bench.ref, bench.packages, b.Layer.Entries, b.ArchiveBytes>>20, b.Layer.Stripped, round(b.Build), round(b.Load), round(call), in.benchSize(c, bench.ref)))
	}
	return lines, nil
}

// benchSize is ", N MiB" as podman reports the image (empty when it cannot say).
func (in *Instance) benchSize(c Images, ref string) string {
	info, err := c.Image(ref)
	if err != nil || info.Size <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%d MiB)", info.Size>>20)
}
