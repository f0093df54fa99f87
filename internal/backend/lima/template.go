package lima

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"text/template"

	"github.com/lima-vm/lima/pkg/limayaml"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/templates"
)

// MountPoint is where the tree appears in the guest.
const MountPoint = "/lever"

// Params are the values the containment template is rendered with.
type Params struct {
	Tree   string // absolute host path of the project tree
	Image  string // absolute path of the guest disk image (qcow2)
	Kernel string // optional: direct kernel boot
	Initrd string
	CPUs   int
	Memory string
	Disk   string
	// CPUType is "max" normally, "host" under nested_virt.
	CPUType string
	// KVMBlacklist keeps the guest kernel from loading kvm without nested_virt: qemu's max
	// model (under TCG too) offers SVM/VMX, and the guest would otherwise get /dev/kvm.
	KVMBlacklist bool
	LegacyBIOS   bool // direct kernel boot needs no UEFI firmware
	// Platform is the VM type, architecture and mount type for the host (PlatformFor).
	Platform
}

// ParamsFrom derives the template values from lever.yaml for the machine lever runs on.
func ParamsFrom(cfg *config.Config) (Params, error) {
	plat, err := PlatformFor(CurrentHost())
	if err != nil {
		return Params{}, err
	}
	return ParamsFor(cfg, plat)
}

// ParamsFor derives the template values from lever.yaml for a given platform. Relative
// paths resolve against the config file's directory. cfg's defaults (cpus, memory, disk)
// are config's to fill (config.Load does, once); ParamsFor takes the values as given.
func ParamsFor(cfg *config.Config, plat Platform) (Params, error) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(cfg.Dir, p)
	}
	tree := cfg.TreePath
	if tree == "" {
		tree = abs(cfg.Tree)
	}
	p := Params{
		Tree:       filepath.Clean(tree),
		Image:      abs(cfg.Lima.Image),
		Kernel:     abs(cfg.Lima.Kernel),
		Initrd:     abs(cfg.Lima.Initrd),
		CPUs:       cfg.Lima.CPUs,
		Memory:     cfg.Lima.Memory,
		Disk:       cfg.Disk,
		CPUType:    "max",
		LegacyBIOS: cfg.Lima.Kernel != "",
		Platform:   plat,
	}
	if cfg.NestedVirt {
		p.CPUType = "host"
	} else {
		p.KVMBlacklist = true
	}
	if p.Image == "" {
		return p, fmt.Errorf("lima.image: a local guest image is required (build one with scripts/lima/build-guest-image.sh)")
	}
	if (p.Kernel == "") != (p.Initrd == "") {
		return p, fmt.Errorf("lima.kernel and lima.initrd: give both (direct kernel boot) or neither")
	}
	if !filepath.IsAbs(p.Tree) || p.Tree == "/" {
		return p, fmt.Errorf("tree: %q is not a usable absolute directory", p.Tree)
	}
	return p, nil
}

var tmpl = template.Must(template.New("lima.yaml").Funcs(template.FuncMap{
	// q quotes a value for YAML: a JSON string is a valid YAML flow scalar, so no value can
	// break out of its field however it is spelled.
	"q": func(s string) (string, error) {
		b, err := json.Marshal(s)
		return string(b), err
	},
}).Parse(templates.LimaYAML))

// Render fills the embedded template and validates the result with Lima's own loader and
// validator (pkg/limayaml), so a template Lima would refuse never reaches limactl.
func Render(p Params) ([]byte, error) {
	b, err := renderOnly(p)
	if err != nil {
		return nil, err
	}
	if _, err := Validate(b); err != nil {
		return nil, err
	}
	return b, nil
}

// renderOnly fills the template without validating: Lima's validator checks a vz
// template against the machine it runs on, so the goldens for other hosts validate
// separately (golden_test.go).
func renderOnly(p Params) ([]byte, error) {
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, p); err != nil {
		return nil, fmt.Errorf("rendering the lima template: %w", err)
	}
	return buf.Bytes(), nil
}

// Validate parses a rendered template as Lima does (defaults filled, no global
// default/override mixed in) and runs Lima's validator. It returns the filled-in config.
func Validate(b []byte) (*limayaml.LimaYAML, error) {
	var y, none limayaml.LimaYAML
	if err := limayaml.Unmarshal(b, &y, "lever lima template"); err != nil {
		return nil, fmt.Errorf("lima template: %w", err)
	}
	// FillDefault resolves paths relative to the instance dir; a scratch dir that is not an
	// instance keeps it from reading or writing anything.
	dir, err := os.MkdirTemp("", "lever-lima-validate-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	limayaml.FillDefault(&y, &none, &none, filepath.Join(dir, "lima.yaml"), false)
	if err := limayaml.Validate(&y, false); err != nil {
		return nil, fmt.Errorf("lima template does not validate: %w", err)
	}
	return &y, nil
}
