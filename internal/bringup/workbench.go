package bringup

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/fspath"
	"github.com/lever-jail/lever/internal/guestside"
	"github.com/lever-jail/lever/internal/guestside/imagebuild"
	"github.com/lever-jail/lever/internal/levimage"
	"github.com/lever-jail/lever/internal/tail"
)

// Workbench bases.
const (
	baseDebian  = levimage.DebianBase // made from the guest's own Debian packages
	baseImage   = "image"             // lev.base_image
	baseTarball = "tarball"           // lev.base_tarball
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
// tag's hex and the mount destinations of the containers that run it
// (levimage.TreeName, which the image helper names the workbench's tree with too), so a
// warm bring-up finds it by name.
func (in *Instance) tree(kind, ref string) string {
	return filepath.Join(in.treesRoot(), levimage.TreeName(kind, ref, in.treeMounts(kind)))
}

// benchTree is the default workbench's tree for its tag; levTree is lev's, for lever's
// own lev image's tag.
func (in *Instance) benchTree(ref string) string { return in.tree("bench", ref) }
func (in *Instance) levTree() string             { return in.tree("lev", in.imageRef) }

// treeMounts are the mount destinations of the planned containers that run a tree of
// kind ("bench": the workbenches; "lev": the lev containers), sorted: the mount points
// the tree, a read-only root, must carry. A destination inside another of the same
// container's mounts (a read-only path or a protected .git under /lever) is left out: its
// mount point is in that mount's content, not in the tree, and a .git appearing in the
// project must not rename (and so rebuild) the trees.
func (in *Instance) treeMounts(kind string) []string {
	seen := map[string]bool{containers.TreeDir: true, containers.BenchMount: true}
	if cs, err := in.plan(Facts{UID: 1}, "i", "b"); err == nil {
		for _, c := range cs {
			if (c.Role == containers.Bench) != (kind == "bench") {
				continue
			}
			for _, m := range c.Mounts {
				inside := false
				for _, o := range c.Mounts {
					if o.Dest != m.Dest && fspath.Within(o.Dest, m.Dest) {
						inside = true
						break
					}
				}
				if !inside {
					seen[m.Dest] = true
				}
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
// layered onto a user base in the guest's podman, or, for the default workbench, returned
// for the image helper to find or make from the guest's own packages (buildInGuest: the
// helper reads them in the guest, so no call here). The facts it returns carry the
// workbench's ref when it is known here.
func (in *Instance) ensureBench(ctx context.Context, c Images, obs Observed, f Facts) (bool, string, *imagebuild.BenchRequest, Facts, error) {
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
	return false, "", in.debianBench(), f, nil
}

func (in *Instance) layerLev(c Images, baseID, ref string) error {
	return c.LayerLev(baseID, ref, in.levBin, levimage.BenchCommand[:1], levimage.BenchCommand[1:],
		map[string]string{containers.LabelRole: "bench"}, nil)
}

// debianBench is the default workbench for the image helper to find or make from the
// guest's own packages: where its tree goes and what its name is made of besides the
// package-state digest the helper reads.
func (in *Instance) debianBench() *imagebuild.BenchRequest {
	return &imagebuild.BenchRequest{Trees: in.treesRoot(), Mounts: in.treeMounts("bench"), LevDigest: in.levDigest}
}

// buildInGuest is the image step's one helper call (`lev __guest images`): lev's tree
// (levDir, when not "") from the helper's own lev, and the default workbench's tree (when
// bench is not nil), which the helper finds by the guest's package-state digest or makes
// from the guest's own packages, read and planned there. It returns a line per tree and
// the facts with the workbench's ref and the digest its tree is named by.
func (in *Instance) buildInGuest(ctx context.Context, levDir string, bench *imagebuild.BenchRequest, f Facts) (_ []string, made bool, _ Facts, _ error) {
	var req imagebuild.Request
	if levDir != "" {
		req.LevDir, req.LevMounts = levDir, in.treeMounts("lev")
	}
	if bench != nil {
		req.Bench = bench
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, false, f, err
	}
	if len(body) > imagebuild.MaxRequest {
		return nil, false, f, fmt.Errorf("the image request is %d bytes, over the guest helper's %d", len(body), imagebuild.MaxRequest)
	}
	t0 := time.Now()
	res, err := in.runHelper(ctx, guestside.ModeImages, body)
	if err != nil {
		return nil, false, f, fmt.Errorf("making lever's trees in the guest: %w", err)
	}
	var resp imagebuild.Response
	if err := json.Unmarshal(res.Stdout, &resp); err != nil {
		return nil, false, f, fmt.Errorf("reading the guest's image helper: %w (%q)", err, tail.Lines(string(res.Stdout), 3, " | "))
	}
	call := time.Since(t0)
	var lines []string
	if levDir != "" {
		if resp.Lev == nil {
			return nil, false, f, fmt.Errorf("the guest's image helper did not make lev's tree")
		}
		// asked for because the observation did not list it: made now, or found whole
		// (a restarted guest, which the observation could not look into, kept it)
		if resp.Lev.Found {
			lines = append(lines, "lev's tree "+levDir+" present")
		} else {
			made = true
			lines = append(lines, fmt.Sprintf("lev's tree %s made in the guest (%s)", levDir, round(resp.Lev.Build)))
		}
	}
	if bench != nil {
		b := resp.Bench
		if b == nil {
			return nil, false, f, fmt.Errorf("the guest's image helper did not make the workbench's tree")
		}
		if b.NoDpkg != "" {
			return nil, false, f, fmt.Errorf("the guest has no dpkg database (%s), so lever cannot make the workbench from its packages: set lev.base_image or lev.base_tarball in %s", b.NoDpkg, in.cfg.Path)
		}
		// The tree must be the one this host names from the digest the helper read: the
		// name a warm bring-up computes from its observation and looks for.
		if len(b.StatusSum) != 64 {
			return nil, false, f, fmt.Errorf("the guest's image helper gave no package-state digest for the workbench (got %q)", b.StatusSum)
		}
		want := in.benchTree(levimage.WorkbenchRef(baseDebian, b.StatusSum, in.levDigest))
		if b.Dir != want {
			return nil, false, f, fmt.Errorf("the guest's image helper put the workbench in %s, but its package-state digest names %s", b.Dir, want)
		}
		f.StatusSum, f.BenchRef = b.StatusSum, want
		if b.Entries == 0 {
			lines = append(lines, "workbench "+want+" present")
		} else {
			made = true
			refused := ""
			if b.Refused > 0 {
				refused = fmt.Sprintf(", %d left out (a user other than root could write them)", b.Refused)
			}
			lines = append(lines, fmt.Sprintf("workbench %s made in the guest from %d of its packages (%d entries: %d files linked to the guest's own, %d copied, %d setuid/setgid bits or capabilities dropped%s; %s: packages read in %s, tree filled in %s, synced in %s)",
				want, b.Packages, b.Entries, b.Linked, b.Copied, b.Stripped, refused, round(b.Build), round(b.Read), round(b.Fill), round(b.Sync)))
		}
	}
	lines = append(lines, "helper call "+round(call))
	return lines, made, f, nil
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
