package probes

// Reading one file for the secret: opened only while it is a regular file, its data
// extents found without reading holes, and each chunk matched with an overlap so a spelling
// across a boundary is found. (Split from scan.go; unchanged.)

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// errNotRegular: the path no longer names a regular file.
var errNotRegular = errors.New("not a regular file")

// openRegular opens path for reading only if it is still a regular file. O_NOFOLLOW: a
// symlink put where a file was is not followed (to /dev/zero, a FIFO, or anywhere the
// search was not asked to look). O_NONBLOCK: opening a FIFO returns at once instead of
// waiting for a writer; a regular file's reads ignore the flag. O_NOCTTY: a terminal
// opened here does not become the helper's. The type is judged on the open file, so a
// path swapped after this cannot change what is read.
func openRegular(path string) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, st, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, st, errNotRegular
	}
	return os.NewFile(uintptr(fd), path), st, nil
}

type matcher struct {
	pats    []Pattern
	digests [][32]byte
	maxLen  int
	buf     []byte
}

// result is what reading one file gave: the spelling found (if any), the data bytes
// read, whether the file holds more data than the cap (and so was not searched whole),
// and a read error.
type result struct {
	spelling string
	n        int64
	over     bool
	err      error
}

// file searches an open regular file of the given size and allocated 512-byte blocks,
// reading at most limit bytes of data.
//
// A file with as many blocks as its size is dense: it is read from the start to its
// end, as it was before holes were looked for (and a file grown past the cap while read
// is over it). One with fewer has holes (or is compressed): only its data extents are
// read, found with SEEK_DATA and SEEK_HOLE, and the cap counts those bytes, so a 1 GiB
// sparse file holding the key in 4 KiB is searched in 4 KiB rather than skipped. A hole
// reads as zeros, in which no spelling (printable text) can lie, so nothing is carried
// from one extent into the next. A filesystem that cannot tell where the data is reads
// as dense.
func (m *matcher) file(f *os.File, size, blocks, limit int64) result {
	var ext [][2]int64
	if blocks*512 < size {
		var over, ok bool
		ext, over, ok = dataExtents(int(f.Fd()), limit)
		if over {
			return result{over: true}
		}
		if !ok {
			ext = nil
		} else if len(ext) == 0 {
			return result{}
		}
	}
	whole := ext == nil
	if whole {
		if size > limit {
			return result{over: true}
		}
		// One byte past the cap tells a file that grew over it while read.
		ext = [][2]int64{{0, limit + 1}}
	}
	var r result
	for _, e := range ext {
		sp, n, err := m.section(io.NewSectionReader(f, e[0], e[1]-e[0]))
		r.n += n
		if sp != "" {
			r.spelling = sp
			return r
		}
		if err != nil {
			r.err = err
			return r
		}
	}
	r.over = whole && r.n > limit
	return r
}

// dataExtents lists the [start, end) ranges of a file's data, from SEEK_DATA and
// SEEK_HOLE. over: more than limit bytes of data (enumeration stops there). ok is false
// when the filesystem cannot say (no SEEK_DATA: EINVAL; or an answer that does not move
// forward, as a no-op llseek gives): the caller reads the file whole.
func dataExtents(fd int, limit int64) (ext [][2]int64, over, ok bool) {
	var total int64
	for off := int64(0); ; {
		start, err := lseek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			return ext, false, true // no data at or after off
		}
		if err != nil || start < off {
			return nil, false, false
		}
		end, err := lseek(fd, start, unix.SEEK_HOLE)
		if err != nil || end <= start {
			return nil, false, false
		}
		if total += end - start; total > limit {
			return nil, true, true
		}
		ext = append(ext, [2]int64{start, end})
		off = end
	}
}

// section searches r chunk by chunk, carrying the last maxLen-1 bytes into the next chunk
// so that a spelling across a chunk boundary is found. err is a read error (not the end).
// Each read takes exactly one chunk, so the boundaries fall at multiples of chunk from
// the start, where the tests put a spelling across one.
func (m *matcher) section(r io.Reader) (spelling string, n int64, err error) {
	keep := 0
	for {
		k, err := io.ReadFull(r, m.buf[keep:keep+chunk])
		n += int64(k)
		data := m.buf[:keep+k]
		if sp := m.search(data); sp != "" {
			return sp, n, nil
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return "", n, nil
		}
		if err != nil {
			return "", n, err
		}
		keep = min(m.maxLen-1, len(data))
		copy(m.buf, data[len(data)-keep:])
	}
}

// search finds each pattern's anchor and confirms the window by its digest. A window
// that runs past the end of data starts in the carried tail and is judged next chunk.
func (m *matcher) search(data []byte) string {
	for i, p := range m.pats {
		for off := 0; ; {
			j := bytes.Index(data[off:], p.Anchor)
			if j < 0 {
				break
			}
			pos := off + j
			if pos+p.Len > len(data) {
				break
			}
			if sha256.Sum256(data[pos:pos+p.Len]) == m.digests[i] {
				return p.Spelling
			}
			off = pos + 1
		}
	}
	return ""
}
