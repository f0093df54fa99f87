package bringup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/containers"

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

// treesRoot is where lever's trees (lev's and the default workbench's, run as overlaid
// root file systems) live in the guest: beside the lev homes (the instance's state dir on
// the netns substrate, /var/lib/lever/<name> on a VM), root's.
func (in *Instance) treesRoot() string {
	return filepath.Join(filepath.Dir(in.levHomeRoot()), "trees")
}

// tree is the tree of kind ("lev", "bench") for a content-addressed tag: named by the
// tag's hex and the mount destinations of the containers that run it (made in it: the
// runtime cannot make them in a root-owned tree, so a worker added later needs a tree
// with its dir), so a warm bring-up finds it by name.
func (in *Instance) tree(kind, ref string) string {
	h := sha256.Sum256([]byte(strings.Join(in.treeMounts(kind), "\n")))
	return filepath.Join(in.treesRoot(), kind+"-"+ref[strings.LastIndexByte(ref, ':')+1:]+"-"+hex.EncodeToString(h[:4]))
}

// benchTree is the default workbench's tree for its tag; levTree is lev's, for lever's
// own lev image's tag.
func (in *Instance) benchTree(ref string) string { return in.tree("bench", ref) }
func (in *Instance) levTree() string             { return in.tree("lev", in.imageRef) }

// treeMounts are the mount destinations of the planned containers that run a tree of
// kind ("bench": the workbenches; "lev": the lev containers), sorted.
func (in *Instance) treeMounts(kind string) []string {
	seen := map[string]bool{containers.TreeDir: true, containers.BenchMount: true}
	if cs, err := in.plan(Facts{UID: 1}, "i", "b"); err == nil {
		for _, c := range cs {
			if (c.Role == containers.Bench) != (kind == "bench") {
				continue
			}
			for _, m := range c.Mounts {
				seen[m.Dest] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// benchPresent: the workbench ref names is there: a tree the observation listed, or an
// image in podman.
func (in *Instance) benchPresent(c Images, obs Observed, ref string) (bool, error) {
	if filepath.IsAbs(ref) {
		return obs.Trees[filepath.Base(ref)], nil
	}
	return c.ImageExists(ref)
}

// benchKnownRef is the workbench's content-addressed ref when it can be computed without
// a guest call: from the base image's ID, the tarball's digest, or the dpkg status digest
// the observe call read (the default workbench's ref is its tree's path). "" when it
// cannot (yet).
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
	return in.benchTree(levimage.WorkbenchRef(baseDebian, f.StatusSum, in.levDigest)), nil
}

// ensureBench makes the workbench image present: present (no build, no guest call),
// layered onto a user base in the guest's podman, or planned from the guest's packages
// (one guest call reads dpkg's database) and returned for the guest to build
// (buildInGuest). The facts it returns carry the workbench's ref (and the package-state
// digest it read).
func (in *Instance) ensureBench(ctx context.Context, c Images, obs Observed, f Facts) (bool, string, *benchPlan, Facts, error) {
	t0 := time.Now()
	ref, err := in.benchKnownRef(c, f)
	if err != nil {
		return false, "", nil, f, err
	}
	if ref != "" {
		if ok, err := in.benchPresent(c, obs, ref); err != nil {
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

// benchPlan is a default workbench to make in the guest: the planned files and the tree
// (its ref).
type benchPlan struct {
	ref      string
	paths    []string
	packages int
}

// planDebianBench reads the guest's dpkg database (one call) and plans the workbench's
// files on the host.
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
	// The tree may be there all the same (an earlier up built it and provisioning changed
	// nothing it is made from): the helper then finds it whole and makes nothing.
	plan, err := debroot.Resolve(gin, levimage.WorkbenchPackages)
	if err != nil {
		return nil, f, fmt.Errorf("planning the workbench: %w", err)
	}
	return &benchPlan{ref: in.benchTree(levimage.WorkbenchRef(baseDebian, f.StatusSum, in.levDigest)), paths: plan.Paths, packages: len(plan.Packages)}, f, nil
}

// buildInGuest is the image step's one helper call (`lev __guest images`): lev's tree
// (levDir, when not "") from the helper's own lev, and the planned workbench's tree (when
// bench is not nil) from the guest's own files, made where the containers run them. It
// returns a line per tree.
func (in *Instance) buildInGuest(ctx context.Context, levDir string, bench *benchPlan) ([]string, error) {
	var req imagebuild.Request
	if levDir != "" {
		req.LevDir, req.LevMounts = levDir, in.treeMounts("lev")
	}
	if bench != nil {
		req.BenchDir, req.BenchMounts, req.Root, req.Paths = bench.ref, in.treeMounts("bench"), "/", bench.paths
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if len(body) > imagebuild.MaxRequest {
		return nil, fmt.Errorf("the image request is %d bytes, over the guest helper's %d", len(body), imagebuild.MaxRequest)
	}
	t0 := time.Now()
	res, err := in.runHelper(ctx, guestside.ModeImages, body)
	if err != nil {
		return nil, fmt.Errorf("making lever's trees in the guest: %w", err)
	}
	var resp imagebuild.Response
	if err := json.Unmarshal(res.Stdout, &resp); err != nil {
		return nil, fmt.Errorf("reading the guest's image helper: %w (%q)", err, tail.Lines(string(res.Stdout), 3, " | "))
	}
	call := time.Since(t0)
	var lines []string
	if levDir != "" {
		if resp.Lev == nil {
			return nil, fmt.Errorf("the guest's image helper did not make lev's tree")
		}
		lines = append(lines, fmt.Sprintf("lev's tree %s made in the guest (%s)", levDir, round(resp.Lev.Build)))
	}
	if bench != nil {
		b := resp.Bench
		if b == nil {
			return nil, fmt.Errorf("the guest's image helper did not make the workbench's tree")
		}
		if b.Entries == 0 {
			lines = append(lines, "workbench "+bench.ref+" present")
		} else {
			refused := ""
			if b.Refused > 0 {
				refused = fmt.Sprintf(", %d left out (a user other than root could write them)", b.Refused)
			}
			lines = append(lines, fmt.Sprintf("workbench %s made in the guest from %d of its packages (%d entries: %d files linked to the guest's own, %d copied, %d setuid/setgid bits or capabilities dropped%s; %s)",
				bench.ref, bench.packages, b.Entries, b.Linked, b.Copied, b.Stripped, refused, round(b.Build)))
		}
	}
	lines = append(lines, "helper call "+round(call))
	return lines, nil
}

// benchSize is ", N MiB" as podman reports the image (empty when it cannot say, or the
// workbench is a tree).
func (in *Instance) benchSize(c Images, ref string) string {
	if filepath.IsAbs(ref) {
		return ""
	}
	info, err := c.Image(ref)
	if err != nil || info.Size <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%d MiB)", info.Size>>20)
}
