package workfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// MaxWriteBytes caps every write a file tool makes: write_file's content, and the file
// edit_file reads and the file it leaves. One constant for both, so an edit can never
// grow a file past what a write could make (replace_all with a longer new_string would
// otherwise grow it without bound, one call at a time).
const MaxWriteBytes = 16 << 20

// CodeWriteCap refuses a write over MaxWriteBytes; nothing is written.
const CodeWriteCap = "write-cap"

// errFDUnknown: the kernel cannot say where an opened descriptor is (no /proc, or the
// file was unlinked since). A check that cannot be made refuses.
var errFDUnknown = errors.New("cannot tell where the opened file is")

// errFDUnsupported: this platform has no way to ask (not Linux); the checks made on the
// resolved path before opening stand alone there.
var errFDUnsupported = errors.New("descriptor paths unsupported on this platform")

// CheckWriteSize refuses n bytes (what a write would leave in path) over MaxWriteBytes,
// naming the cap; what says whose size n is ("the content is", "the result would be").
func CheckWriteSize(tool, path string, n int64, what string) error {
	if n <= MaxWriteBytes {
		return nil
	}
	return &Refusal{Code: CodeWriteCap, Path: path,
		Msg: fmt.Sprintf("%s: refused: %s: %s", tool, path, WriteCapText(what, n))}
}

// WriteCapText says that n bytes are over the write cap: "the content is 20 MiB, over
// the 16 MiB write cap (MaxWriteBytes); nothing was written".
func WriteCapText(what string, n int64) string {
	return fmt.Sprintf("%s %s, over the %s write cap (MaxWriteBytes); nothing was written", what, humanSize(n), humanSize(MaxWriteBytes))
}

// humanSize: "16 MiB", "70.3 MiB (73714483 bytes)", "512 bytes".
func humanSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func stateRefusal(tool, given, real, what string) *Refusal {
	return &Refusal{Code: CodeLevState, Path: given, Real: real,
		Msg: fmt.Sprintf("%s: refused: %s is lev's own state (%s); no tool reads or writes it", tool, given, what)}
}

func (f *FS) writeOutside(tool string, a Access, real, why string) *Refusal {
	return &Refusal{Code: CodeWriteOutside, Path: a.Path, Real: real,
		Msg: fmt.Sprintf("%s: refused: %s %s; writes never leave the workdir", tool, a.Path, why)}
}

// relWrite is a.Real relative to the workdir, refused when it is not beneath it.
func (f *FS) relWrite(tool string, a Access) (string, error) {
	rel, err := filepath.Rel(f.Workdir, a.Real)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", &Refusal{Code: CodeWriteOutside, Path: a.Path, Real: a.Real,
			Msg: fmt.Sprintf("%s: refused: %s is outside the workdir", tool, a.Path)}
	}
	return rel, nil
}

// mapWriteErr turns what opening for a write failed with into the tool's error.
func (f *FS) mapWriteErr(tool string, a Access, err error) error {
	var r *Refusal
	var nr errNotRegular
	switch {
	case errors.As(err, &r):
		return r
	case errors.Is(err, errEscape):
		return f.writeOutside(tool, a, a.Real, "resolves outside the workdir")
	case errors.As(err, &nr):
		return notRegular(tool, a.Path, nr)
	}
	return fmt.Errorf("%s: %s: %w", tool, a.Path, unwrapPathErr(err))
}

// WriteFile writes an access returned by ResolveWrite, creating parent directories. The
// file is opened through descriptors from the workdir down, each checked where it really
// is before anything is made in it (openWrite), and written through its descriptor.
func (f *FS) WriteFile(tool string, a Access, data []byte) error {
	if err := CheckWriteSize(tool, a.Path, int64(len(data)), "the content is"); err != nil {
		return err
	}
	rel, err := f.relWrite(tool, a)
	if err != nil {
		return err
	}
	if err := f.protectedWrite(tool, a); err != nil {
		return err
	}
	file, err := f.openWrite(tool, a, rel, os.O_WRONLY, true)
	if err != nil {
		return err
	}
	defer file.Close()
	if err := replaceContents(file, data); err != nil {
		return fmt.Errorf("%s: %s: %w", tool, a.Path, err)
	}
	return file.Close()
}

// EditFile reads the existing file a (from ResolveWrite), passes its bytes to edit and
// writes what edit returns, all through one checked descriptor: the edit reads exactly
// the file it writes, and neither is reached by name after the checks. The file before
// and after is capped at MaxWriteBytes.
func (f *FS) EditFile(tool string, a Access, edit func(old []byte) ([]byte, error)) error {
	rel, err := f.relWrite(tool, a)
	if err != nil {
		return err
	}
	if err := f.protectedWrite(tool, a); err != nil {
		return err
	}
	file, err := f.openWrite(tool, a, rel, os.O_RDWR, false)
	if err != nil {
		return err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return fmt.Errorf("%s: %s: %w", tool, a.Path, err)
	}
	if err := CheckWriteSize(tool, a.Path, st.Size(), "the file is"); err != nil {
		return err
	}
	// One byte more than the cap: a file grown since the fstat is caught, not cut.
	buf := make([]byte, st.Size()+1)
	n, err := readFullAt(file, buf, 0)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", tool, a.Path, err)
	}
	if err := CheckWriteSize(tool, a.Path, int64(n), "the file is"); err != nil {
		return err
	}
	out, err := edit(buf[:n])
	if err != nil {
		return err
	}
	if err := CheckWriteSize(tool, a.Path, int64(len(out)), "the result would be"); err != nil {
		return err
	}
	if err := replaceContents(file, out); err != nil {
		return fmt.Errorf("%s: %s: %w", tool, a.Path, err)
	}
	return file.Close()
}

// replaceContents writes data over the open regular file (opened without O_TRUNC, so
// nothing was cut before the descriptor was checked).
func replaceContents(file *os.File, data []byte) error {
	if err := file.Truncate(0); err != nil {
		return err
	}
	_, err := file.WriteAt(data, 0)
	return err
}
