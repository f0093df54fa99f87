// Package sbxtest builds what the sandbox end-to-end tests need: a container image made
// locally from Debian's busybox-static (nothing is pulled).
//
// It is for tests only: no non-test file may import it.
package sbxtest

import (
	"archive/tar"
	"os"
	"os/exec"
	"strings"
)

// WriteBusyboxRootfs writes a minimal rootfs tarball: Debian's static busybox and a
// symlink per applet.
func WriteBusyboxRootfs(path string) error {
	bb := "/bin/busybox"
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return err
	}
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	tw := tar.NewWriter(fh)
	dir := func(name string, mode int64) {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode})
	}
	file := func(name string, mode int64, b []byte) {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b))})
		tw.Write(b)
	}
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "root"} {
		dir(d, 0o755)
	}
	dir("tmp", 0o1777)
	file("bin/busybox", 0o755, data)
	for _, a := range strings.Fields(string(list)) {
		if a == "busybox" {
			continue
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777})
	}
	file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"))
	file("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	return tw.Close()
}
