package levimage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
)

// WorkbenchRepo is the local repository of the workbench images: the image an agent's
// tools run in (a real userland plus /lev, which serves the bench exec channel).
const WorkbenchRepo = "localhost/lever/workbench"

// WorkbenchFormat versions how a workbench is made; bump it when the package list, the
// planner or the layer format changes, so a guest's old image is not taken for current.
const WorkbenchFormat = "workbench/1"

// WorkbenchPackages are the guest packages the default workbench is made of (with their
// dependency closure). Entries may list alternatives.
var WorkbenchPackages = []string{
	"base-files", "dash", "bash", "coreutils", "findutils", "grep", "sed", "mawk|gawk|original-awk",
	"tar", "gzip", "diffutils", "git", "make", "ca-certificates",
}

// BenchCommand is what the workbench container runs (jail sets it explicitly too, so a
// user base's ENTRYPOINT cannot interfere).
var BenchCommand = []string{"/lev", "bench", "serve", "--socket", "/run/lever-bench/exec.sock"}

// BenchEnv is the workbench image's environment.
var BenchEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp", "SSL_CERT_DIR=/etc/ssl/certs"}

// FileDigest is the hex sha256 of a file.
func FileDigest(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// WorkbenchRef is the content-addressed reference of a workbench: a key over the format
// version, the base (base says which kind: "debian", "image", "tarball"; baseDigest is the
// guest's dpkg status digest, the base image's ID, or the tarball's digest) and the lev
// binary's digest. A warm bring-up computes it from what it already observed and asks
// podman whether the tag exists: no build, no guest call.
func WorkbenchRef(base, baseDigest, levDigest string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%s", WorkbenchFormat, base, baseDigest, levDigest, strings.Join(WorkbenchPackages, " "))
	return WorkbenchRepo + ":" + hex.EncodeToString(h.Sum(nil))[:12]
}

// BuildWorkbench assembles the default workbench: the normalised base layer (made from
// the guest's own packages) and lev's layer on top, tagged ref. The same inputs give the
// same bytes.
// dpkgArch is the guest's dpkg architecture.
func BuildWorkbench(levBinary string, baseLayer []byte, ref, dpkgArch string) (*Image, error) {
	if err := CheckStatic(levBinary, ociArch(dpkgArch)); err != nil {
		return nil, err
	}
	levLayer, err := rootfs(Spec{LevBinary: levBinary})
	if err != nil {
		return nil, err
	}
	rc := runConfig{
		Entrypoint: BenchCommand[:1],
		Cmd:        BenchCommand[1:],
		Env:        BenchEnv,
		WorkingDir: "/lever",
		Labels:     map[string]string{"io.lever.role": "bench"},
	}
	return assemble(ociArch(dpkgArch), rc, [][]byte{baseLayer, levLayer},
		[]string{"lever workbench: guest Debian packages", "lever levimage: /lev"},
		func(string) string { return ref })
}

// ociArch maps dpkg's architecture names to OCI's where they differ.
func ociArch(dpkg string) string {
	switch dpkg {
	case "", "amd64":
		return "amd64"
	case "armhf", "armel":
		return "arm"
	case "i386":
		return "386"
	case "ppc64el":
		return "ppc64le"
	}
	return dpkg // arm64, riscv64, s390x are the same
}
