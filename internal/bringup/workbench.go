package bringup

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/guest"
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
// layered onto a user base in the guest's podman, or built from the guest's packages
// (two guest calls: read dpkg's database, tar the planned files) and loaded. The facts it
// returns carry the workbench's ref (and the package-state digest it read).
func (in *Instance) ensureBench(ctx context.Context, c Images, f Facts) (bool, string, Facts, error) {
	t0 := time.Now()
	ref, err := in.benchKnownRef(c, f)
	if err != nil {
		return false, "", f, err
	}
	if ref != "" {
		if ok, err := c.ImageExists(ref); err != nil {
			return false, "", f, err
		} else if ok {
			f.BenchRef = ref
			return false, "workbench " + ref + " present" + in.benchSize(c, ref), f, nil
		}
	}
	switch in.benchBase() {
	case baseImage:
		info, err := c.Image(in.cfg.Lev.BaseImage)
		if err != nil {
			return false, "", f, err
		}
		if err := in.layerLev(c, info.ID, ref); err != nil {
			return false, "", f, err
		}
		f.BenchRef = ref
		return true, fmt.Sprintf("workbench %s built on %s in %s%s", ref, in.cfg.Lev.BaseImage, round(time.Since(t0)), in.benchSize(c, ref)), f, nil
	case baseTarball:
		data, err := os.ReadFile(in.cfg.Lev.BaseTarball)
		if err != nil {
			return false, "", f, fmt.Errorf("lev.base_tarball: %w", err)
		}
		names, err := c.LoadArchive(data)
		if err != nil {
			return false, "", f, fmt.Errorf("lev.base_tarball %s: %w", in.cfg.Lev.BaseTarball, err)
		}
		if len(names) == 0 {
			return false, "", f, fmt.Errorf("lev.base_tarball %s loaded no image", in.cfg.Lev.BaseTarball)
		}
		info, err := c.Image(names[0])
		if err != nil {
			return false, "", f, err
		}
		if err := in.layerLev(c, info.ID, ref); err != nil {
			return false, "", f, err
		}
		f.BenchRef = ref
		return true, fmt.Sprintf("workbench %s loaded from %s and built in %s%s", ref, in.cfg.Lev.BaseTarball, round(time.Since(t0)), in.benchSize(c, ref)), f, nil
	}
	return in.buildDebianBench(ctx, c, f, t0)
}

func (in *Instance) layerLev(c Images, baseID, ref string) error {
	return c.LayerLev(baseID, ref, in.levBin, levimage.BenchCommand[:1], levimage.BenchCommand[1:],
		map[string]string{containers.LabelRole: "bench"}, nil)
}

// buildDebianBench reads the guest's dpkg database (one call), plans the file list on the
// host, tars exactly those files in the guest (a second call) and loads the normalised
// two-layer image.
func (in *Instance) buildDebianBench(ctx context.Context, c Images, f Facts, t0 time.Time) (bool, string, Facts, error) {
	sc := debroot.Gather()
	res, err := in.Runner.Run(ctx, sc.Cmd(nil))
	if err != nil {
		return false, "", f, fmt.Errorf("reading the guest's packages: %w", err)
	}
	if res.ExitCode == 3 {
		return false, "", f, fmt.Errorf("the guest has no dpkg database (%s), so lever cannot make the workbench from its packages: set lev.base_image or lev.base_tarball in %s", strings.TrimSpace(string(res.Stderr)), in.cfg.Path)
	}
	if res.ExitCode != 0 {
		return false, "", f, fmt.Errorf("reading the guest's packages: exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	secs, err := sc.Parse(res.Stdout)
	if err != nil {
		return false, "", f, fmt.Errorf("reading the guest's packages: %w", err)
	}
	gin, err := debroot.ParseGather(secs)
	if err != nil {
		return false, "", f, err
	}
	f.StatusSum = gin.StatusSum
	ref := levimage.WorkbenchRef(baseDebian, f.StatusSum, in.levDigest)
	// Provisioning may have just installed what made the status change: the tag may
	// exist all the same (another instance built it).
	if ok, err := c.ImageExists(ref); err == nil && ok {
		f.BenchRef = ref
		return false, "workbench " + ref + " present" + in.benchSize(c, ref), f, nil
	}
	plan, err := debroot.Resolve(gin, levimage.WorkbenchPackages)
	if err != nil {
		return false, "", f, fmt.Errorf("planning the workbench: %w", err)
	}
	tres, err := in.Runner.Run(ctx, guest.Cmd{As: guest.Root, Argv: guestTarArgv("/"), Stdin: []byte(strings.Join(plan.Paths, "\n") + "\n")})
	if err != nil {
		return false, "", f, fmt.Errorf("copying the workbench files from the guest: %w", err)
	}
	if tres.ExitCode != 0 {
		return false, "", f, fmt.Errorf("copying the workbench files from the guest: tar exit %d: %s", tres.ExitCode, tail.Lines(string(tres.Stderr), 3, " | "))
	}
	layer, st, err := levimage.NormaliseLayer(bytes.NewReader(tres.Stdout))
	tres.Stdout = nil
	if err != nil {
		return false, "", f, err
	}
	im, err := levimage.BuildWorkbench(in.levBin, layer, ref, gin.Arch)
	if err != nil {
		return false, "", f, err
	}
	if _, err := c.LoadArchive(im.Archive); err != nil {
		return false, "", f, fmt.Errorf("loading the workbench: %w", err)
	}
	if ok, err := c.ImageExists(ref); err != nil || !ok {
		return false, "", f, fmt.Errorf("loaded the workbench but podman has no %s (%v)", ref, err)
	}
	f.BenchRef = ref
	return true, fmt.Sprintf("workbench %s built from %d guest packages (%d files, %d MiB archive, %d setuid/setgid bits cleared) and loaded in %s%s",
		ref, len(plan.Packages), st.Entries, len(im.Archive)>>20, st.Stripped, round(time.Since(t0)), in.benchSize(c, ref)), f, nil
}

// guestTarArgv archives exactly the names on stdin, relative to root: no recursion into
// directories (the plan lists every path), files that vanished since the read are
// skipped, and --verbatim-files-from makes every line a file name, never an option (a
// line such as "--checkpoint-action=exec=..." would otherwise run a command as root).
func guestTarArgv(root string) []string {
	return []string{"tar", "-C", root, "--no-recursion", "--ignore-failed-read", "--verbatim-files-from", "-cf", "-", "-T", "-"}
}

// benchSize is ", N MiB" as podman reports the image (empty when it cannot say).
func (in *Instance) benchSize(c Images, ref string) string {
	info, err := c.Image(ref)
	if err != nil || info.Size <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%d MiB)", info.Size>>20)
}
