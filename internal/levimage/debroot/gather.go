package debroot

import (
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"strings"
)

// StateDigestPart defines state_digest (statedigest.sh), the package-state digest the
// default workbench's tag derives from; bring-up's observation call folds it in.
//
//go:embed statedigest.sh
var StateDigestPart string

//go:embed gather.sh
var gatherPart string

// GatherScript reads, in one guest call as root, everything Resolve needs (gather.sh).
var GatherScript = StateDigestPart + gatherPart

// ParseGather splits GatherScript's output into Inputs. Output that does not end with the
// end marker is refused (a cut-off read would plan an incomplete image).
func ParseGather(out []byte) (Inputs, error) {
	in := Inputs{Lists: map[string][]string{}, RootLinks: map[string]string{}, AltLinks: map[string]string{}}
	var status bytes.Buffer
	section, altName := "", ""
	var altLines []string
	ended := false
	flushAlt := func() error {
		if section != "alt" {
			return nil
		}
		a, err := parseAlternative(altName, altLines)
		if err != nil {
			return err
		}
		in.Alternatives = append(in.Alternatives, a)
		altLines = nil
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		l := sc.Text()
		if rest, ok := strings.CutPrefix(l, "@@lever "); ok {
			if err := flushAlt(); err != nil {
				return Inputs{}, err
			}
			section, altName = rest, ""
			if n, ok := strings.CutPrefix(rest, "alt "); ok {
				section, altName = "alt", n
			}
			if section == "end" {
				ended = true
			}
			continue
		}
		switch section {
		case "arch":
			in.Arch = strings.TrimSpace(l)
		case "statussum":
			in.StatusSum = strings.TrimSpace(l)
		case "status":
			status.WriteString(l)
			status.WriteByte('\n')
		case "lists":
			// grep -H: /var/lib/dpkg/info/NAME.list:PATH
			file, p, ok := strings.Cut(l, ".list:")
			if !ok {
				return Inputs{}, fmt.Errorf("file list line %q has no .list: prefix", l)
			}
			name := file[strings.LastIndex(file, "/")+1:]
			in.Lists[name] = append(in.Lists[name], p)
		case "rootlinks":
			k, v, ok := strings.Cut(l, "\t")
			if !ok {
				return Inputs{}, fmt.Errorf("root symlink line %q", l)
			}
			in.RootLinks[k] = v
		case "altlinks":
			k, v, ok := strings.Cut(l, "\t")
			if !ok {
				return Inputs{}, fmt.Errorf("alternatives link line %q", l)
			}
			in.AltLinks[k] = v
		case "alt":
			altLines = append(altLines, l)
		case "certs":
			in.Certs = append(in.Certs, l)
		case "end":
		default:
			return Inputs{}, fmt.Errorf("guest output before any section: %q", l)
		}
	}
	if err := sc.Err(); err != nil {
		return Inputs{}, err
	}
	if err := flushAlt(); err != nil {
		return Inputs{}, err
	}
	if len(in.StatusSum) != 64 {
		return Inputs{}, fmt.Errorf("guest package listing has no dpkg status digest (got %q)", in.StatusSum)
	}
	if !ended {
		return Inputs{}, fmt.Errorf("guest package listing is incomplete (no end marker)")
	}
	in.Status = status.Bytes()
	return in, nil
}

// parseAlternative reads /var/lib/dpkg/alternatives/NAME: the mode, the master link, then
// slave name/link pairs up to a blank line (the choices after it are not needed: the
// current choice is what /etc/alternatives/NAME points to).
func parseAlternative(name string, lines []string) (Alternative, error) {
	if len(lines) < 2 {
		return Alternative{}, fmt.Errorf("alternatives file %s: too short", name)
	}
	a := Alternative{Links: map[string]string{name: lines[1]}}
	for i := 2; i+1 < len(lines) && lines[i] != ""; i += 2 {
		a.Links[lines[i]] = lines[i+1]
	}
	return a, nil
}
