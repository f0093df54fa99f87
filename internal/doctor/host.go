package doctor

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lever-jail/lever/internal/backend"
)

// toolTimeout bounds one `tool --version` (and each backend's probe).
const toolTimeout = 10 * time.Second

// NamespacePrefix is the prefix of the netns backend's namespaces (netns.Options.Prefix's
// default).
const NamespacePrefix = "lever-"

// HostProbe is the real Probe. The jail's own facts come from the caller (the CLI, which
// loads lever.yaml and observes the jail as lever status does): doctor imports neither
// bring-up nor the broker's server.
type HostProbe struct {
	Cfg        Config
	CAFunc     func(stateDir string) Cert
	BrokerFunc func(stateDir string) Broker
	JailFunc   func(ctx context.Context) *Jail
	// NetnsDir and ProcDir are /run/netns and /proc (the tests point them elsewhere).
	NetnsDir, ProcDir string
}

func (h HostProbe) Host() (string, string) { return runtime.GOOS, runtime.GOARCH }
func (h HostProbe) Config() Config         { return h.Cfg }
func (h HostProbe) Now() time.Time         { return time.Now() }

func (h HostProbe) CA(dir string) Cert {
	if h.CAFunc == nil {
		return Cert{Missing: true}
	}
	return h.CAFunc(dir)
}

func (h HostProbe) Broker(dir string) Broker {
	if h.BrokerFunc == nil {
		return Broker{}
	}
	return h.BrokerFunc(dir)
}

func (h HostProbe) Jail(ctx context.Context) *Jail {
	if h.JailFunc == nil {
		return nil
	}
	return h.JailFunc(ctx)
}

// Backends runs every registered backend's own probe, in parallel.
func (h HostProbe) Backends(ctx context.Context) []Backend {
	ds := backend.All()
	out := make([]Backend, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, 2*toolTimeout)
			defer cancel()
			a := d.Probe(pctx)
			out[i] = Backend{Name: d.Profile.Name, Usable: a.Usable, Tool: a.Tool, Version: a.Version, Reason: a.Reason,
				Accelerator: a.Accelerator, AccelWhy: a.AcceleratorWhy}
		}()
	}
	wg.Wait()
	return out
}

// Tool finds name on PATH and the first line of its --version.
func (h HostProbe) Tool(ctx context.Context, name string) Tool {
	p, err := exec.LookPath(name)
	if err != nil {
		return Tool{}
	}
	ctx, cancel := context.WithTimeout(ctx, toolTimeout)
	defer cancel()
	out, _ := exec.CommandContext(ctx, p, "--version").Output()
	v, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if name == "shellcheck" {
		// "ShellCheck - shell script analysis tool" first; the version is a later line
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "version:") {
				v = "shellcheck " + strings.TrimSpace(strings.TrimPrefix(l, "version:"))
			}
		}
	}
	return Tool{Path: p, Version: v}
}

// KVM opens /dev/kvm read-write as this user, as QEMU will.
func (h HostProbe) KVM() KVM {
	k := KVM{User: strconv.Itoa(os.Getuid())}
	if u, err := user.Current(); err == nil {
		k.User = u.Username
	}
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return k
	}
	k.Present = true
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		k.OpenErr = strings.TrimPrefix(err.Error(), "open /dev/kvm: ")
		return k
	}
	f.Close()
	return k
}

func (h HostProbe) FreeBytes(path string) (uint64, error) {
	// the state dir may not exist yet: its nearest existing parent holds it
	for {
		if _, err := os.Stat(path); err == nil || filepath.Dir(path) == path {
			break
		}
		path = filepath.Dir(path)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}

func (h HostProbe) dirs() (string, string) {
	n, p := h.NetnsDir, h.ProcDir
	if n == "" {
		n = "/run/netns"
	}
	if p == "" {
		p = "/proc"
	}
	return n, p
}

// Namespaces lists /run/netns entries named like lever's and counts the processes inside
// each, by the namespace's inode against every process's /proc/PID/ns/net (other users'
// links are readable by root only: without root the count is -1).
func (h HostProbe) Namespaces() ([]Namespace, error) {
	nsDir, procDir := h.dirs()
	ents, err := os.ReadDir(nsDir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	inode := map[uint64]int{}
	var ns []Namespace
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), NamespacePrefix) {
			continue
		}
		n := Namespace{Name: e.Name(), Procs: -1}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(nsDir, e.Name()), &st) == nil && os.Geteuid() == 0 {
			n.Procs = 0
			inode[uint64(st.Ino)] = len(ns)
		}
		ns = append(ns, n)
	}
	if len(inode) == 0 {
		return ns, nil
	}
	procs, err := os.ReadDir(procDir)
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(procDir, p.Name(), "ns", "net"), &st) != nil {
			continue
		}
		if i, ok := inode[uint64(st.Ino)]; ok {
			ns[i].Procs++
		}
	}
	return ns, nil
}

// Leftovers finds exec sessions' conmon processes (conmon --exec-attach) whose command has
// ended (no child left) and which only wait out a podman exit delay longer than the one
// lever provisions (ProvisionedExitDelay: those exit by themselves within seconds).
func (h HostProbe) Leftovers() ([]Process, error) {
	_, procDir := h.dirs()
	procs, err := os.ReadDir(procDir)
	if err != nil {
		return nil, err
	}
	var out []Process
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join(procDir, p.Name())
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "conmon" {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		if !contains(args, "--exec-attach") || exitDelay(args) <= ProvisionedExitDelay {
			continue
		}
		kids, err := os.ReadFile(filepath.Join(dir, "task", p.Name(), "children"))
		if err != nil || strings.TrimSpace(string(kids)) != "" {
			continue
		}
		out = append(out, Process{PID: pid, User: owner(dir), What: "conmon of a finished exec session"})
	}
	return out, nil
}

// ProvisionedExitDelay is the exit_command_delay (seconds) of the containers.conf lever
// provisions for the run user (internal/provision/provision.sh).
const ProvisionedExitDelay = 10

// exitDelay is the value of conmon's --exit-delay argument, 0 when it has none.
func exitDelay(args []string) int {
	for i, a := range args {
		if a == "--exit-delay" && i+1 < len(args) {
			n, err := strconv.Atoi(args[i+1])
			if err == nil {
				return n
			}
		}
	}
	return 0
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// owner is the user name of the process whose /proc dir is dir (its real uid).
func owner(dir string) string {
	f, err := os.Open(filepath.Join(dir, "status"))
	if err != nil {
		return "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 1 && f[0] == "Uid:" {
			if u, err := user.LookupId(f[1]); err == nil {
				return u.Username
			}
			return "uid " + f[1]
		}
	}
	return "?"
}

// ReadCert reads a PEM certificate's validity (the broker's CA: brokerctl.CAPath).
func ReadCert(path string) Cert {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return Cert{Path: path, Missing: true}
	}
	if err != nil {
		return Cert{Path: path, Err: err.Error()}
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return Cert{Path: path, Err: path + ": no PEM certificate in it"}
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return Cert{Path: path, Err: path + ": " + err.Error()}
	}
	return Cert{Path: path, NotAfter: c.NotAfter}
}
