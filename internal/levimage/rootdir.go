package levimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RootDirStats says how MakeRootDir made the workbench's tree.
type RootDirStats struct {
	Entries  int // paths made
	Linked   int // regular files hard-linked to the guest's own
	Copied   int // regular files copied (not linkable: see linkable)
	Stripped int // of the copies, those whose setuid/setgid bits or capabilities were dropped
	Refused  int // regular files left out: a user other than root could write them
	// Fill and Sync are how long filling the tree took, and flushing the file system and
	// renaming it into place after (under emulation each is seconds: the figures say
	// where a slow bring-up's image step went).
	Fill time.Duration
	Sync time.Duration
}

// MakeRootDir makes the default workbench as a directory tree at dir, for podman to run as
// an overlaid root filesystem (--rootfs dir:O): no image is built, loaded or ID-mapped,
// which under qemu's TCG cost minutes for the 150 MiB of packages. It holds exactly the
// planned paths under root (debroot.Plan.Paths, parents first), by NormaliseLayer's rules
// where a tree can follow them: directories made by root with their permission bits
// (setuid/setgid dropped), symlinks re-made, regular files hard-linked to the guest's own
// when they are root's, neither setuid, setgid, group- or world-writable nor carrying
// file capabilities (the container cannot write them: they are root's and its root file
// system is read-only), and otherwise copied with those bits and capabilities dropped;
// device nodes, FIFOs and anything under a symlinked directory left out. lev's layer
// (/lev, its passwd and group) goes on top, and the mount points podman needs in a
// read-only root are made empty (podman's own, and the container's mount destinations,
// mounts: the runtime cannot make them in a root-owned tree).
//
// It builds in a sibling temporary directory and renames it into place, so dir is whole
// or absent; an existing dir is kept as it is (the name is content-addressed).
func MakeRootDir(root string, paths []string, lev *LevLayer, dir string, mounts []string) (RootDirStats, error) {
	var st RootDirStats
	t0 := time.Now()
	_, err := lev.build(dir, func(tmp string) error {
		var err error
		st, err = fillRootDir(tmp, root, paths)
		if err != nil {
			return err
		}
		if err := lev.write(tmp); err != nil {
			return err
		}
		err = mountPoints(tmp, mounts)
		st.Fill = time.Since(t0)
		return err
	})
	if st.Fill > 0 {
		st.Sync = time.Since(t0) - st.Fill
	}
	return st, err
}

// MakeLevRootDir makes lev's tree at dir: lev's layer alone (/lev, its passwd and group,
// its directories: the lev image's only layer) and the mount points of the containers
// that run it (absolute). Whole or absent, as MakeRootDir's; an existing dir is kept, and
// made says whether this call put the tree in place (false: it was there whole).
func MakeLevRootDir(lev *LevLayer, dir string, mounts []string) (made bool, _ error) {
	return lev.build(dir, func(tmp string) error {
		if err := lev.write(tmp); err != nil {
			return err
		}
		return mountPoints(tmp, mounts)
	})
}

// LevLayer is lev's layer (the lev image's only layer: /lev, a minimal passwd and group,
// its directories) for the trees one helper call makes. /lev (21 MiB) is written into the
// first tree a build with this layer puts in place; a later tree hard-links that file
// instead (the trees are root's, side by side on one file system, and no container writes
// a tree: each runs one as an overlay's lower layer), and gets it written when the link
// cannot be made (another file system) or the file is no longer what writing it would
// make. lev's bytes are read at most once, and only when /lev is to be written: a tree
// that links lever's installed copy (LinkFrom) never reads them (under TCG, reading and
// copying 21 MiB into a tar in memory cost about half a second of the guest's CPU).
type LevLayer struct {
	// rest is the layer's tar without /lev.
	rest []byte
	// levPath and levSize are the binary /lev is made from, as ReadLevLayer found it.
	levPath string
	levSize int64
	// levData is levPath's bytes, once read (the first tree that writes /lev).
	levData []byte
	// lev is the /lev this layer put into a tree now in place; "" until a build with it
	// has put one there.
	lev string
}

// levMode is /lev's mode in every tree (and in the lev image's layer).
const levMode = 0o755

// ReadLevLayer makes lev's layer of levBinary (its bytes are read when first written),
// with caCerts (PEM files, such as the guest's CABundle) under /etc/ssl/certs by their
// base names: lev's web and HTTP tools verify public HTTPS against them.
func ReadLevLayer(levBinary string, caCerts ...string) (*LevLayer, error) {
	fi, err := os.Stat(levBinary)
	if err != nil {
		return nil, fmt.Errorf("reading lev binary: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("reading lev binary: %s is not a regular file", levBinary)
	}
	rest, err := layerTar(Spec{LevBinary: levBinary, CACerts: caCerts}, false)
	if err != nil {
		return nil, err
	}
	return &LevLayer{rest: rest, levPath: levBinary, levSize: fi.Size()}, nil
}

// levBytes reads lev once. A binary whose size changed since ReadLevLayer is refused:
// every tree of one layer gets the same /lev.
func (l *LevLayer) levBytes() ([]byte, error) {
	if l.levData != nil {
		return l.levData, nil
	}
	b, err := os.ReadFile(l.levPath)
	if err != nil {
		return nil, fmt.Errorf("reading lev binary: %w", err)
	}
	if int64(len(b)) != l.levSize {
		return nil, fmt.Errorf("lev binary %s changed while the trees were made (%d bytes, was %d)", l.levPath, len(b), l.levSize)
	}
	l.levData = b
	return b, nil
}

// InstalledLevDir is where lever installs its lev in a VM guest, one file per binary,
// named lev-<first 32 hex of its sha256>, written once by a rename and never changed
// (guestside.Helper).
const InstalledLevDir = "/var/lib/lever/bin"

var installedName = regexp.MustCompile(`^lev-[0-9a-f]{32}$`)

// LinkFrom makes the trees' /lev a hard link to lev, the binary this layer was read from,
// when lev is lever's installed copy: a file named by its digest directly in dir
// (InstalledLevDir in the guest), a directory that is root's and only root can even
// enter (0700), which is never written in place. /lev must still have the exact mode and
// size writing it would give (linkLev checks). A lev anywhere else (the netns substrate
// runs the host's, which a rebuild may rewrite in place) is copied as before.
func (l *LevLayer) LinkFrom(lev, dir string) {
	if filepath.Dir(lev) != filepath.Clean(dir) || !installedName.MatchString(filepath.Base(lev)) {
		return
	}
	di, err := os.Lstat(dir)
	if err != nil || !di.IsDir() || di.Mode().Perm() != 0o700 {
		return
	}
	if sys, ok := di.Sys().(*syscall.Stat_t); !ok || sys.Uid != uint32(os.Geteuid()) {
		return
	}
	if l.lev == "" {
		l.lev = lev
	}
}

// build is buildDir, remembering the tree's /lev for the next tree when this build put
// the tree in place (not when dir was there already, nor when another build's won).
func (l *LevLayer) build(dir string, fill func(tmp string) error) (placed bool, _ error) {
	placed, err := buildDir(dir, fill)
	if err == nil && placed && l.lev == "" {
		l.lev = filepath.Join(dir, "lev")
	}
	return placed, err
}

// buildDir fills a sibling temporary directory and renames it to dir, so dir is whole or
// absent: a failure leaves nothing. An existing dir is kept as it is (the names are
// content-addressed), and one another build put in place meanwhile wins. Something else
// at the name (not a directory, or not this builder's) is refused, naming it: kept, it
// would be reported and run as the tree.
func buildDir(dir string, fill func(tmp string) error) (placed bool, _ error) {
	if fi, err := os.Lstat(dir); err == nil {
		return false, builtHere(dir, fi)
	}
	tmp := filepath.Join(filepath.Dir(dir), ".build-"+filepath.Base(dir)+"-"+strconv.Itoa(os.Getpid()))
	if err := os.RemoveAll(tmp); err != nil {
		return false, err
	}
	// root's alone while it is filled: nobody else can reach into it before it is whole
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return false, fmt.Errorf("making %s: %w", tmp, err)
	}
	if err := fill(tmp); err != nil {
		os.RemoveAll(tmp)
		return false, err
	}
	// On disk before its name says it is whole: a warm bring-up trusts a listed tree.
	if err := syncDir(tmp); err != nil {
		os.RemoveAll(tmp)
		return false, err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return false, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if fi, e := os.Lstat(dir); e == nil {
			return false, builtHere(dir, fi)
		}
		return false, fmt.Errorf("putting %s in place: %w", dir, err)
	}
	return true, nil
}

// builtHere is nil when fi, found at dir, can be a tree buildDir put there: a directory
// (not a symlink to one) owned by this process's user (root, in a guest).
func builtHere(dir string, fi fs.FileInfo) error {
	var what string
	switch sys, ok := fi.Sys().(*syscall.Stat_t); {
	case fi.Mode()&fs.ModeSymlink != 0:
		what = "a symlink"
	case !fi.IsDir():
		what = "not a directory (" + fi.Mode().String() + ")"
	case !ok:
		what = "a directory whose owner cannot be read"
	case sys.Uid != uint32(os.Geteuid()):
		what = "a directory of uid " + strconv.Itoa(int(sys.Uid))
	default:
		return nil
	}
	return fmt.Errorf("%s is there but is not a tree lever made (%s): remove it and re-run", dir, what)
}

// fillRootDir makes the planned paths under tmp (MakeRootDir's rules) in three passes:
// every source is looked at (lstat) by several workers; then, in the plan's order (parents
// first), the directories and symlinks are made and what lies under a symlinked directory
// is left out; then the regular files are linked or copied by several workers, each taking
// a run of consecutive paths (mostly one directory). Each file is a few system calls, and
// under emulation (qemu's TCG) each call costs tens of microseconds: one worker left the
// guest's second CPU idle for the 4-6 s the workbench's 4344 entries took.
func fillRootDir(tmp, root string, paths []string) (RootDirStats, error) {
	var st RootDirStats
	type source struct {
		name string
		info fs.FileInfo
		err  error
		// loose: a directory on the way down (from root) is one a user other than root
		// could write, so the file at this path could be swapped between its look and
		// its link
		loose bool
	}
	srcs := make([]source, len(paths))
	for i, p := range paths {
		name, err := cleanName(p)
		if err != nil {
			return st, err
		}
		srcs[i].name = name
	}
	inParallel(len(srcs), func(i int) error {
		srcs[i].info, srcs[i].err = os.Lstat(filepath.Join(root, srcs[i].name))
		return nil
	})
	links := map[string]bool{}
	// the directories a user other than root could write, or that sit under one (the
	// plan lists every parent before its children)
	loose := map[string]bool{}
	if fi, err := os.Lstat(root); err != nil || !rootWritesOnly(fi) {
		loose["."] = true
	}
	var files []int
	for i, s := range srcs {
		if underLink(s.name, links) {
			continue
		}
		if s.err != nil {
			if errors.Is(s.err, fs.ErrNotExist) {
				continue // as tar's --ignore-failed-read
			}
			return st, s.err
		}
		src, dst, info := filepath.Join(root, s.name), filepath.Join(tmp, s.name), s.info
		switch {
		case info.IsDir():
			loose[s.name] = loose[path.Dir(s.name)] || !rootWritesOnly(info)
			if err := os.Mkdir(dst, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return st, err
			}
			// chmod, not Mkdir's mode: the umask must not narrow it. No group or world
			// write and no sticky bit: only root writes a tree (a package's 1777 /tmp is a
			// tmpfs in the containers anyway).
			if err := os.Chmod(dst, info.Mode().Perm()&^0o022); err != nil {
				return st, err
			}
			if info.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				st.Stripped++
			}
			st.Entries++
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				continue
			}
			if err := os.Symlink(target, dst); err != nil {
				return st, err
			}
			links[s.name] = true
			st.Entries++
		case info.Mode().IsRegular():
			if !rootWritesOnly(info) {
				// Someone besides root could have written it, the key among anything:
				// the key search reads a tree only where non-root users could write, so
				// such a file stays out of the tree.
				st.Refused++
				continue
			}
			srcs[i].loose = loose[path.Dir(s.name)]
			files = append(files, i)
		default:
			continue // devices, FIFOs, sockets
		}
	}
	if afterLooks != nil {
		afterLooks()
	}
	// the files: their directories are all made, and no two workers touch one path
	var mu sync.Mutex
	err := inParallel(len(files), func(k int) error {
		s := srcs[files[k]]
		src, dst := filepath.Join(root, s.name), filepath.Join(tmp, s.name)
		var linked, stripped bool
		if linkable(src, s.info) && os.Link(src, dst) == nil {
			// Where another user could swap the file (a loose directory on its way) the
			// link is kept only when it is the file judged above: with the looks done
			// first, seconds can pass under emulation before the link. Under root's
			// directories alone nobody else can, and the check (an lstat per file: ~0.9 s
			// for the workbench under TCG) is not made.
			if !s.loose {
				linked = true
			} else if fi, err := os.Lstat(dst); err == nil && os.SameFile(fi, s.info) {
				linked = true
			} else if err := os.Remove(dst); err != nil {
				return err
			}
		}
		// not linked (another file system, the guest forbids it, or replaced): copied
		if !linked {
			var err error
			if stripped, err = copyPlain(src, dst, s.info); err != nil {
				return err
			}
		}
		mu.Lock()
		defer mu.Unlock()
		st.Entries++
		switch {
		case linked:
			st.Linked++
		case stripped:
			st.Copied++
			st.Stripped++
		default:
			st.Copied++
		}
		return nil
	})
	return st, err
}

// afterLooks, when set (by a test), runs between fillRootDir's looks and its links.
var afterLooks func()

// maxWorkers bounds inParallel's workers (a variable: the tests force several).
var maxWorkers = min(runtime.NumCPU(), 4)

// inParallel runs do(0..n-1) on a few workers (as many as there are CPUs, up to 4), each
// taking the next run of consecutive indexes, and returns the error of the lowest index
// that failed (later runs are not started once one failed). Few items run in this
// goroutine.
func inParallel(n int, do func(i int) error) error {
	const run = 64
	workers := min(maxWorkers, (n+run-1)/run)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			if err := do(i); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		next   atomic.Int64
		failed atomic.Bool
		mu     sync.Mutex
		first  = -1
		ferr   error
		wg     sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				start := int(next.Add(run)) - run
				if start >= n {
					return
				}
				for i := start; i < min(start+run, n); i++ {
					if err := do(i); err != nil {
						mu.Lock()
						if first < 0 || i < first {
							first, ferr = i, err
						}
						mu.Unlock()
						failed.Store(true)
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	return ferr
}

// rootWritesOnly: owned by root and writable by no group or other user.
func rootWritesOnly(info fs.FileInfo) bool {
	sys, ok := info.Sys().(*syscall.Stat_t)
	return ok && sys.Uid == 0 && info.Mode().Perm()&0o022 == 0
}

// linkable: a file the workbench may share with the guest by a hard link.
func linkable(p string, info fs.FileInfo) bool {
	sys, ok := info.Sys().(*syscall.Stat_t)
	if !ok || sys.Uid != 0 || sys.Gid != 0 || info.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 || info.Mode().Perm()&0o022 != 0 {
		return false
	}
	// file capabilities travel with the inode
	if n, err := unix.Lgetxattr(p, "security.capability", nil); err == nil && n > 0 {
		return false
	}
	return true
}

// copyPlain copies a regular file's contents to dst (a new file), owned by root with its
// permission bits minus setuid, setgid and group/world write, and no extended attributes.
// The source is opened without following a symlink or blocking on a FIFO and must still
// be a regular file.
func copyPlain(src, dst string, info fs.FileInfo) (stripped bool, err error) {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return false, fmt.Errorf("copying %s: %w", src, err)
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil || !fi.Mode().IsRegular() {
		return false, fmt.Errorf("copying %s: it is no longer a regular file", src)
	} else if !os.SameFile(fi, info) {
		// not the file judged (owner, mode) when the tree was planned
		return false, fmt.Errorf("copying %s: it was replaced while the tree was made", src)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return false, fmt.Errorf("copying %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return false, err
	}
	mode := info.Mode().Perm() &^ 0o022
	if err := os.Chmod(dst, mode); err != nil {
		return false, err
	}
	_, hadCap := unix.Lgetxattr(src, "security.capability", nil)
	return info.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 || hadCap == nil, nil
}

// write puts lev's layer on top of the tree at dir, replacing what is there as an upper
// layer would; /lev is hard-linked to the one an earlier tree got (linkLev) or written.
func (l *LevLayer) write(dir string) error {
	tr := tar.NewReader(bytes.NewReader(l.rest))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, path.Clean(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			// as the package dirs: only root writes a tree (lev's 1777 /tmp is a tmpfs
			// in the containers)
			if err := os.Chmod(p, fs.FileMode(h.Mode).Perm()&^0o022); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := writeTreeFile(p, tr, fs.FileMode(h.Mode).Perm()); err != nil {
				return err
			}
		}
	}
	p := filepath.Join(dir, "lev")
	os.Remove(p)
	if l.linkLev(p) {
		return nil
	}
	b, err := l.levBytes()
	if err != nil {
		return err
	}
	return writeTreeFile(p, bytes.NewReader(b), levMode)
}

// writeTreeFile replaces p with a new file of r's bytes and mode.
func writeTreeFile(p string, r io.Reader, mode fs.FileMode) error {
	os.Remove(p)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chmod(p, mode)
}

// linkLev hard-links to p the /lev an earlier tree got, when there is one and it is still
// what writing /lev would make: a regular file of lev's size and exact mode (no setuid or
// setgid), owned by this process's user (root, in the guest). False when there is none,
// it is not, or the link fails (EXDEV: another file system): p is then written.
func (l *LevLayer) linkLev(p string) bool {
	if l.lev == "" {
		return false
	}
	fi, err := os.Lstat(l.lev)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode() != levMode || fi.Size() != l.levSize {
		return false
	}
	if sys, ok := fi.Sys().(*syscall.Stat_t); !ok || sys.Uid != uint32(os.Geteuid()) {
		return false
	}
	return os.Link(l.lev, p) == nil
}

// mountPoints makes, where the packages did not, what the runtime mounts over in a
// read-only root it cannot write: podman's generated /etc files, the kernel's file
// systems, the tmpfs dirs, and the given mount destinations (absolute).
func mountPoints(dir string, mounts []string) error {
	for _, d := range append([]string{"proc", "sys", "dev", "run", "tmp", "etc"}, mounts...) {
		name, err := cleanName(strings.TrimPrefix(d, "/"))
		if err != nil {
			return fmt.Errorf("mount point %q: %w", d, err)
		}
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			return err
		}
	}
	for _, f := range []string{"etc/hostname", "etc/hosts", "etc/resolv.conf", "run/.containerenv"} {
		p := filepath.Join(dir, f)
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			return err
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "etc/mtab")); err != nil {
		if err := os.Symlink("/proc/mounts", filepath.Join(dir, "etc/mtab")); err != nil {
			return err
		}
	}
	return nil
}
