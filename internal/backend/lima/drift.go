package lima

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/lima-vm/lima/pkg/limayaml"
)

// Instance is the part of one `limactl list --json` line lever reads.
type Instance struct {
	Name   string `json:"name"`
	Status string `json:"status"` // Running, Stopped, Broken, ...
	Dir    string `json:"dir"`
	// Config is the realized config: Lima's defaults, the template, then the global
	// _config/default.yaml and _config/override.yaml, merged. It is what the VM boots with.
	Config Realized `json:"config"`
}

// Realized holds the security-relevant fields of a realized Lima config. The element types
// are Lima's own (pkg/limayaml), so the comparison sees exactly what Lima will act on.
type Realized struct {
	Plain           *bool                    `json:"plain"`
	MountType       *string                  `json:"mountType"`
	Mounts          []limayaml.Mount         `json:"mounts"`
	PortForwards    []limayaml.PortForward   `json:"portForwards"`
	Containerd      limayaml.Containerd      `json:"containerd"`
	SSH             limayaml.SSH             `json:"ssh"`
	Networks        []limayaml.Network       `json:"networks"`
	AdditionalDisks []json.RawMessage        `json:"additionalDisks"`
	CopyToHost      []limayaml.CopyToHost    `json:"copyToHost"`
	HostResolver    limayaml.HostResolver    `json:"hostResolver"`
	VMType          *string                  `json:"vmType"`
	Images          []map[string]interface{} `json:"images"`
}

// ParseList reads `limactl list --json` output (one JSON object per line) and returns the
// instance called name, or nil when there is none.
func ParseList(out []byte, name string) (*Instance, error) {
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if err.Error() == "EOF" {
				return nil, nil
			}
			return nil, fmt.Errorf("parsing limactl list --json: %w", err)
		}
		var head struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return nil, fmt.Errorf("parsing limactl list --json: %w", err)
		}
		if head.Name != name {
			continue
		}
		var inst Instance
		if err := json.Unmarshal(raw, &inst); err != nil {
			return nil, fmt.Errorf("parsing limactl list --json entry %q: %w", name, err)
		}
		return &inst, nil
	}
}

// Intent is what the lever template asks for, in the terms the drift check compares.
type Intent struct {
	Tree         string
	MountType    string
	PortForwards []limayaml.PortForward
}

// IntentOf derives the intent from a validated template (see Validate).
func IntentOf(p Params, y *limayaml.LimaYAML) Intent {
	in := Intent{Tree: p.Tree, PortForwards: y.PortForwards}
	if y.MountType != nil {
		in.MountType = *y.MountType
	}
	return in
}

// Drift lists every way the realized config holds more than the template asked for: any
// mount, port forward, containerd, network, disk or SSH forwarding setting it did not
// request. Empty means none. Each entry names the field and the offending value.
func Drift(in Intent, got Realized) []string {
	var d []string
	if got.Plain != nil && *got.Plain {
		d = append(d, "plain: true (plain mode drops the tree mount; the template asks for false)")
	}
	if got.MountType == nil || *got.MountType != in.MountType {
		d = append(d, fmt.Sprintf("mountType: %s, template asks for %q", strp(got.MountType), in.MountType))
	}
	treeSeen := false
	for i, m := range got.Mounts {
		mp := ""
		if m.MountPoint != nil {
			mp = *m.MountPoint
		}
		w := m.Writable != nil && *m.Writable
		if filepath.Clean(m.Location) == in.Tree && mp == MountPoint && !treeSeen {
			treeSeen = true
			if !w {
				d = append(d, fmt.Sprintf("mounts[%d]: the tree at %s is not writable", i, MountPoint))
			}
			if in.MountType == "reverse-sshfs" && (m.SSHFS.Cache == nil || *m.SSHFS.Cache) {
				d = append(d, fmt.Sprintf("mounts[%d]: sshfs cache is on (the template turns it off)", i))
			}
			if in.MountType == "reverse-sshfs" && m.SSHFS.FollowSymlinks != nil && *m.SSHFS.FollowSymlinks {
				// With followSymlinks the host's sftp server follows a symlink planted in the
				// tree (tree/x -> ~/.ssh/id_ed25519) and serves the host file behind it.
				d = append(d, fmt.Sprintf("mounts[%d]: sshfs followSymlinks is on (the host would follow links planted in the tree to files outside it)", i))
			}
			continue
		}
		d = append(d, fmt.Sprintf("mounts[%d]: %s at %s (writable=%t) is not in the template", i, m.Location, orDefault(mp, m.Location), w))
	}
	if !treeSeen {
		d = append(d, fmt.Sprintf("mounts: the tree %s at %s is missing", in.Tree, MountPoint))
	}
	want := map[string]int{}
	for j, pf := range in.PortForwards {
		want[pfKey(pf)] = j
	}
	if len(got.PortForwards) < len(in.PortForwards) {
		d = append(d, fmt.Sprintf("portForwards: %d rules, the template's %d ignore-all rules are not all there", len(got.PortForwards), len(in.PortForwards)))
	}
	for i, pf := range got.PortForwards {
		// Lima applies the first matching rule, so the template's rules must also come
		// first and in order; anything else, even another ignore rule, is drift.
		if i < len(in.PortForwards) && pfKey(pf) == pfKey(in.PortForwards[i]) {
			continue
		}
		if j, ok := want[pfKey(pf)]; ok {
			d = append(d, fmt.Sprintf("portForwards[%d]: the template's rule %d is displaced (a rule before it would match first)", i, j))
			continue
		}
		d = append(d, fmt.Sprintf("portForwards[%d]: %s is not in the template", i, pfKey(pf)))
	}
	if b := got.Containerd.System; b == nil || *b {
		d = append(d, fmt.Sprintf("containerd.system: %s, template asks for false", boolp(b)))
	}
	if b := got.Containerd.User; b == nil || *b {
		d = append(d, fmt.Sprintf("containerd.user: %s, template asks for false", boolp(b)))
	}
	if b := got.SSH.ForwardAgent; b != nil && *b {
		d = append(d, "ssh.forwardAgent: true (the host's SSH agent would reach the guest)")
	}
	if b := got.SSH.ForwardX11; b != nil && *b {
		d = append(d, "ssh.forwardX11: true")
	}
	if b := got.SSH.LoadDotSSHPubKeys; b != nil && *b {
		d = append(d, "ssh.loadDotSSHPubKeys: true")
	}
	for i, n := range got.Networks {
		d = append(d, fmt.Sprintf("networks[%d]: %s is not in the template", i, compact(n)))
	}
	for i, a := range got.AdditionalDisks {
		d = append(d, fmt.Sprintf("additionalDisks[%d]: %s is not in the template", i, string(a)))
	}
	for i, c := range got.CopyToHost {
		d = append(d, fmt.Sprintf("copyToHost[%d]: %s is not in the template", i, compact(c)))
	}
	return d
}

// DriftError is returned when the realized config differs from the template.
type DriftError struct {
	VM          string
	Differences []string
}

func (e *DriftError) Error() string {
	return fmt.Sprintf("lima VM %q: realized config differs from lever's template, refusing to continue (check %s/_config/default.yaml and override.yaml):\n  - %s",
		e.VM, "$LIMA_HOME", strings.Join(e.Differences, "\n  - "))
}

// pfKey is a canonical, readable form of a port forward rule (Lima's JSON field names).
func pfKey(pf limayaml.PortForward) string { return compact(pf) }

func compact(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

func strp(s *string) string {
	if s == nil {
		return "unset"
	}
	return fmt.Sprintf("%q", *s)
}

func boolp(b *bool) string {
	if b == nil {
		return "unset"
	}
	return fmt.Sprint(*b)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
