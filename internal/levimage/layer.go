package levimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/lever-jail/lever/internal/fspath"
)

// NormaliseLayer rewrites a tar stream read from the guest into a layer whose bytes depend
// only on the files' paths, types, permission bits and contents: owner root with no
// names, every timestamp the epoch, no extended attributes (file capabilities included),
// no setuid/setgid bits (the containers run with no-new-privileges and no capabilities
// anyway; a privilege-raising file has no business in an agent's workbench), no device
// nodes or FIFOs, and nothing under a symlinked directory (an extractor would write
// through the link). It refuses absolute or ".." names.
func NormaliseLayer(r io.Reader) ([]byte, LayerStats, error) {
	var st LayerStats
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tr := tar.NewReader(r)
	links := map[string]bool{} // symlinked paths seen so far
	kept := map[string]bool{}  // regular files kept (hard link targets)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, st, fmt.Errorf("reading the guest's tar stream: %w", err)
		}
		name, err := cleanName(h.Name)
		if err != nil {
			return nil, st, err
		}
		if underLink(name, links) {
			st.Dropped++
			continue
		}
		out := &tar.Header{Name: name, ModTime: epoch, Format: tar.FormatPAX}
		out.Mode = h.Mode &^ 0o6000 // drop setuid and setgid, keep the sticky bit
		switch h.Typeflag {
		case tar.TypeDir:
			out.Typeflag, out.Name = tar.TypeDir, name+"/"
		case tar.TypeReg:
			out.Typeflag, out.Size = tar.TypeReg, h.Size
			kept[name] = true
		case tar.TypeSymlink:
			out.Typeflag, out.Linkname = tar.TypeSymlink, h.Linkname
			links[name] = true
		case tar.TypeLink:
			target, err := cleanName(h.Linkname)
			if err != nil {
				return nil, st, err
			}
			if !kept[target] {
				st.Dropped++
				continue
			}
			out.Typeflag, out.Linkname = tar.TypeLink, target
			kept[name] = true
		default: // devices, FIFOs, anything else
			st.Dropped++
			continue
		}
		if h.Mode&0o6000 != 0 {
			st.Stripped++
		}
		if err := tw.WriteHeader(out); err != nil {
			return nil, st, fmt.Errorf("writing %s: %w", name, err)
		}
		if out.Typeflag == tar.TypeReg {
			n, err := io.Copy(tw, tr)
			if err != nil {
				return nil, st, fmt.Errorf("copying %s: %w", name, err)
			}
			st.Bytes += n
		}
		st.Entries++
	}
	if err := tw.Close(); err != nil {
		return nil, st, err
	}
	return buf.Bytes(), st, nil
}

// LayerStats says what NormaliseLayer kept and changed.
type LayerStats struct {
	Entries  int   // entries written
	Bytes    int64 // file content bytes
	Dropped  int   // device nodes, FIFOs, entries under a symlink, dangling hard links
	Stripped int   // entries whose setuid/setgid bits were cleared
}

func cleanName(n string) (string, error) {
	n = strings.TrimSuffix(n, "/")
	c := path.Clean(n)
	if n == "" || path.IsAbs(n) || c == "." || !fspath.Within(".", c) {
		return "", fmt.Errorf("guest tar entry %q is not a relative path inside the image", n)
	}
	return c, nil
}

func underLink(name string, links map[string]bool) bool {
	for d := path.Dir(name); d != "."; d = path.Dir(d) {
		if links[d] {
			return true
		}
	}
	return false
}
