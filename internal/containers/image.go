package containers

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	buildahDefine "github.com/containers/buildah/define"
	podcontainers "github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
)

// ImageInfo is what lever reads back about an image.
type ImageInfo struct {
	ID   string
	Size int64
}

// Image inspects an image in the guest's podman.
func (c *Client) Image(ref string) (*ImageInfo, error) {
	r, err := images.GetImage(c.ctx, ref, nil)
	if err != nil {
		return nil, fmt.Errorf("inspecting image %s: %w", ref, err)
	}
	return &ImageInfo{ID: r.ID, Size: r.Size}, nil
}

// LayerLev builds ref in the guest's podman: the image baseID with the static lev binary
// added as /lev and the given entrypoint and command, through the build API with a
// context holding only the binary and a Containerfile. The pull policy is "never": the
// base must already be in podman (no registry is reached), and nothing is RUN, so the
// build starts no container.
func (c *Client) LayerLev(baseID, ref, levBinary string, entrypoint, cmd []string, labels map[string]string, log io.Writer) error {
	dir, err := os.MkdirTemp("", "lever-layer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lev, err := os.ReadFile(levBinary)
	if err != nil {
		return fmt.Errorf("reading lev binary: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lev"), lev, 0o755); err != nil {
		return err
	}
	var cf strings.Builder
	fmt.Fprintf(&cf, "FROM %s\nCOPY lev /lev\nENTRYPOINT %s\nCMD %s\n", baseID, jsonArray(entrypoint), jsonArray(cmd))
	for _, k := range sortedKeys(labels) {
		fmt.Fprintf(&cf, "LABEL %q=%q\n", k, labels[k])
	}
	cfPath := filepath.Join(dir, "Containerfile")
	if err := os.WriteFile(cfPath, []byte(cf.String()), 0o644); err != nil {
		return err
	}
	if log == nil {
		log = io.Discard
	}
	opts := types.BuildOptions{BuildOptions: buildahDefine.BuildOptions{
		ContextDirectory: dir,
		Output:           ref,
		PullPolicy:       buildahDefine.PullNever,
		Out:              log,
		Err:              log,
		ReportWriter:     log,
		Layers:           false,
	}}
	c.imageWrites.Add(1)
	_, err = images.Build(c.ctx, []string{cfPath}, opts)
	if err != nil && strings.Contains(err.Error(), "layer not known") {
		// Seen once in ~6 runs with podman 4.3.1 while other rootless podman users were
		// busy on the same host: the build container's fresh layer was not found when
		// mounted. Nothing was committed; one retry of the same build is safe.
		_, err = images.Build(c.ctx, []string{cfPath}, opts)
	}
	if err != nil {
		return fmt.Errorf("layering lev onto %s as %s: %w", baseID, ref, err)
	}
	return nil
}

func jsonArray(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// ImageWrites is how many image loads and builds this client has made.
func (c *Client) ImageWrites() int64 { return c.imageWrites.Load() }

// RunOnce runs ct (with Spec's hardening) to completion with the given entrypoint, and
// returns its exit code and output; the container is removed afterwards. Acceptance-style
// checks and tests use it to look inside an image under the jail's confinement.
func (c *Client) RunOnce(ct Container, entrypoint []string) (int32, string, error) {
	s := Spec(ct)
	s.Entrypoint = entrypoint
	_ = c.Remove(ct.Name)
	if _, err := podcontainers.CreateWithSpec(c.ctx, s, nil); err != nil {
		return 0, "", fmt.Errorf("creating container %s: %w", ct.Name, err)
	}
	defer c.Remove(ct.Name)
	if err := podcontainers.Start(c.ctx, ct.Name, nil); err != nil {
		return 0, "", fmt.Errorf("starting container %s: %w", ct.Name, err)
	}
	code, err := c.Wait(ct.Name)
	if err != nil {
		return 0, "", err
	}
	logs, err := c.Logs(ct.Name)
	return code, logs, err
}
