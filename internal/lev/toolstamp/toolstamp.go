// Package toolstamp is the provenance stamp install_tool writes into each script it
// installs under <workdir>/.lev/tools: one comment line naming the run that installed it,
// the run's workdir, the time, and the SHA-256 of the script. A script whose stamp is
// missing, malformed or does not match its bytes was not installed as it is by
// install_tool (a shell command or an editor changed it since), and Verify says so.
//
// It owns the stamp's format and its check. It must not write files: the pipeline's
// install_tool does, through the workdir fence.
package toolstamp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Dir is where installed tools live, relative to the workdir.
const Dir = ".lev/tools"

// Ext is an installed tool's file extension.
const Ext = ".sh"

// Prefix starts the stamp line.
const Prefix = "# lev-install-tool: "

// nameRe is an installed tool's name: it becomes a file name under Dir, so no separator,
// no dot, nothing that could leave the directory or hide (".x").
var nameRe = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// CheckName refuses a name that is not a plain file name for Dir.
func CheckName(name string) error {
	if !nameRe.MatchString(name) {
		return fmt.Errorf("tool name %q: 1-64 lower-case letters, digits, _ and -, starting with a letter", name)
	}
	return nil
}

// Path is the workdir-relative path of the tool named name.
func Path(name string) string { return Dir + "/" + name + Ext }

// Stamp is what the stamp line records.
type Stamp struct {
	SHA256  string    `json:"sha256"`
	Run     string    `json:"run"`
	Workdir string    `json:"workdir"`
	Time    time.Time `json:"time"`
}

func (s Stamp) String() string {
	return fmt.Sprintf("installed by run %s in %s at %s", s.Run, s.Workdir, s.Time.UTC().Format(time.RFC3339))
}

// Render returns the file install_tool writes: the script with the stamp line after its
// first line when that is a #! line, else first. The hash is of the script as given.
func Render(script []byte, run, workdir string, at time.Time) []byte {
	sum := sha256.Sum256(script)
	line, _ := json.Marshal(Stamp{SHA256: hex.EncodeToString(sum[:]), Run: run, Workdir: workdir, Time: at.UTC().Truncate(time.Second)})
	stamp := append([]byte(Prefix), line...)
	stamp = append(stamp, '\n')
	// A lone #! line with no newline has nothing to run: the stamp goes first, so no byte
	// is added to the script.
	if i := bytes.IndexByte(script, '\n'); bytes.HasPrefix(script, []byte("#!")) && i >= 0 {
		out := append([]byte(nil), script[:i+1]...)
		out = append(out, stamp...)
		return append(out, script[i+1:]...)
	}
	return append(stamp, script...)
}

// Errors Verify returns.
var (
	ErrUnstamped = errors.New("no install_tool stamp")
	ErrTampered  = errors.New("the script does not match its stamp's hash: it changed after install_tool wrote it")
)

// Verify reads a file's stamp and checks it against the script's bytes. On ErrTampered the
// stamp is still returned (who installed what was there before the change).
func Verify(file []byte) (Stamp, error) {
	var s Stamp
	script, line, ok := split(file)
	if !ok {
		return s, ErrUnstamped
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil || s.SHA256 == "" || s.Run == "" {
		return Stamp{}, fmt.Errorf("%w (a malformed stamp line)", ErrUnstamped)
	}
	sum := sha256.Sum256(script)
	if hex.EncodeToString(sum[:]) != s.SHA256 {
		return s, ErrTampered
	}
	return s, nil
}

// split finds the stamp line (the first line, or the second after a #! line) and returns
// the script without it and the stamp's JSON.
func split(file []byte) (script, stamp []byte, ok bool) {
	start := 0
	if bytes.HasPrefix(file, []byte("#!")) {
		i := bytes.IndexByte(file, '\n')
		if i < 0 {
			return nil, nil, false
		}
		start = i + 1
	}
	rest := file[start:]
	if !bytes.HasPrefix(rest, []byte(Prefix)) {
		return nil, nil, false
	}
	end := bytes.IndexByte(rest, '\n')
	if end < 0 {
		return nil, nil, false
	}
	script = append(append([]byte(nil), file[:start]...), rest[end+1:]...)
	return script, rest[len(Prefix):end], true
}
