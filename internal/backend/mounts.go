package backend

import (
	"strconv"
	"strings"
)

// Mount is one line of `findmnt -rn -o TARGET,FSTYPE[,OPTIONS[,SOURCE]]`, the listing
// every backend's containment check prints. Columns the check did not ask for are "".
type Mount struct {
	Target, FSType, Options, Source string
}

// ParseMounts reads findmnt's raw (-r) output. findmnt -r escapes blanks and other
// unsafe bytes as \xNN, so a mount point with a space cannot shift the columns; the
// escapes are undone in Target and Source. Lines with fewer than two columns are
// skipped (findmnt prints none).
func ParseMounts(out string) []Mount {
	var ms []Mount
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		m := Mount{Target: unescapeMount(f[0]), FSType: f[1]}
		if len(f) > 2 {
			m.Options = f[2]
		}
		if len(f) > 3 {
			m.Source = unescapeMount(f[3])
		}
		ms = append(ms, m)
	}
	return ms
}

// HasOption reports whether the comma-separated mount options hold o exactly.
func (m Mount) HasOption(o string) bool {
	for _, x := range strings.Split(m.Options, ",") {
		if x == o {
			return true
		}
	}
	return false
}

// unescapeMount undoes findmnt -r's \xNN escapes; a malformed escape stays as written.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\x`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] == 'x' {
			if c, err := strconv.ParseUint(s[i+2:i+4], 16, 8); err == nil {
				b.WriteByte(byte(c))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
