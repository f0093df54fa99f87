package guest

import (
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// sectionsPrelude defines sec and put, the only way a structured guest script answers.
//
//go:embed scripts/sections.sh
var sectionsPrelude string

// Script is one guest script in the sections format: the prelude (scripts/sections.sh)
// and the parts given, run by `sh -s` from stdin, so one call carries them all. Every
// Script has its own marker nonce; Parse accepts only sections carrying it.
type Script struct {
	mark string
	text string
}

// NewScript assembles a script from embedded parts, in order. The parts share the
// prelude's functions and the script's positional parameters.
func NewScript(parts ...string) Script {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic("guest: no randomness for a script marker: " + err.Error())
	}
	mark := "@@lever-" + hex.EncodeToString(b) + "-"
	return Script{mark: mark, text: "M='" + mark + "'\n" + sectionsPrelude + strings.Join(parts, "\n")}
}

// Text is the whole script as the guest's sh reads it.
func (s Script) Text() string { return s.text }

// Cmd runs the script as root in one guest call: env are NAME=value inputs, args its
// positional parameters.
func (s Script) Cmd(env []string, args ...string) Cmd {
	argv := []string{"env"}
	argv = append(argv, env...)
	argv = append(argv, "sh", "-s", "--")
	return Cmd{As: Root, Argv: append(argv, args...), Stdin: []byte(s.text)}
}

// Section is one part of a script's answer: what its command printed and its status.
type Section struct {
	Out string `json:"out"`
	RC  int    `json:"rc"`
}

// Sections are a script's answer by section name.
type Sections map[string]Section

// Has reports whether the script printed section name.
func (s Sections) Has(name string) bool { _, ok := s[name]; return ok }

// OK is section name's output when the script printed it and its command succeeded;
// otherwise an error naming the section, its status and what it wrote to stderr.
func (s Sections) OK(name string) (string, error) {
	sec, ok := s[name]
	if !ok {
		return "", fmt.Errorf("the guest printed no section %q", name)
	}
	if sec.RC != 0 {
		msg := fmt.Sprintf("section %q exited %d", name, sec.RC)
		if e := strings.TrimSpace(s[name+".stderr"].Out); e != "" {
			msg += ": " + e
		}
		return "", errors.New(msg)
	}
	return sec.Out, nil
}

// Prefixed is the sections whose names begin with prefix (stderr blocks included).
func (s Sections) Prefixed(prefix string) Sections {
	out := Sections{}
	for k, v := range s {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// Parse reads the script's stdout. Markers must pair up (a begin inside an open section,
// an end naming another section, or a section printed twice is refused: the answer is
// not what the script printed); lines outside any section are ignored. With an error it
// still returns the sections complete before it (a cut-off answer says what ran).
func (s Script) Parse(out []byte) (Sections, error) { return parseSections(string(out), s.mark) }

func parseSections(out, mark string) (Sections, error) {
	secs := Sections{}
	var cur string
	open := false
	var body []string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, mark+"begin "):
			if open {
				return secs, fmt.Errorf("guest script output: section %q begins inside %q", strings.TrimPrefix(line, mark+"begin "), cur)
			}
			cur, body, open = strings.TrimPrefix(line, mark+"begin "), nil, true
		case strings.HasPrefix(line, mark+"end "):
			f := strings.Fields(strings.TrimPrefix(line, mark+"end "))
			if !open || len(f) != 2 || f[0] != cur {
				return secs, fmt.Errorf("guest script output: bad end marker %q", strings.TrimPrefix(line, mark))
			}
			rc, err := strconv.Atoi(f[1])
			if err != nil {
				return secs, fmt.Errorf("guest script output: bad status in %q", strings.TrimPrefix(line, mark))
			}
			if secs.Has(cur) {
				return secs, fmt.Errorf("guest script output: section %q printed twice", cur)
			}
			secs[cur] = Section{Out: strings.Join(body, "\n"), RC: rc}
			open = false
		case open:
			body = append(body, line)
		}
	}
	if open {
		return secs, fmt.Errorf("guest script output: section %q has no end (cut off?)", cur)
	}
	return secs, nil
}
