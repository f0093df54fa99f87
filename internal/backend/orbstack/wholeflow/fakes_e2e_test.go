//go:build e2e && linux

package wholeflow

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The fakes are this test binary run again with fakeEnv naming the part it plays. Their
// shared settings come in the environment lever passes down (the test sets them).
const (
	fakeEnv    = "LEVER_FLOW_FAKE"    // orb | ssh | master | init | world
	envState   = "LEVER_FLOW_STATE"   // the fake machine's state (JSON), kept by fake orb
	envLog     = "LEVER_FLOW_LOG"     // every orb and ssh call, one JSON line each
	envHolder  = "LEVER_FLOW_HOLDER"  // host pid of the substrate's init (its pid 1)
	envNetns   = "LEVER_FLOW_NETNS"   // the substrate's network namespace
	envMachine = "LEVER_FLOW_MACHINE" // lever-<name>
	envTree    = "LEVER_FLOW_TREE"    // the tree orb create must mount
	envRoot    = "LEVER_FLOW_ROOT"    // the substrate's private dirs (etc, home, varlib)
	envStateD  = "LEVER_FLOW_STATEDIR"
)

// machine is what fake orb knows about the one machine: OrbStack's own record.
type machine struct {
	Exists  bool   `json:"exists"`
	Running bool   `json:"running"`
	Arch    string `json:"arch"`
}

func loadMachine() machine {
	var m machine
	b, _ := os.ReadFile(os.Getenv(envState))
	json.Unmarshal(b, &m)
	return m
}

func (m machine) save() { b, _ := json.Marshal(m); os.WriteFile(os.Getenv(envState), b, 0o644) }

// call is one logged orb or ssh invocation.
type call struct {
	Tool string   `json:"tool"`
	Argv []string `json:"argv"`
	// HelperELF is the ELF machine of a binary lever piped in for a guest helper.
	HelperELF string `json:"helper_elf,omitempty"`
	Refused   string `json:"refused,omitempty"`
}

func logCall(c call) {
	b, _ := json.Marshal(c)
	f, err := os.OpenFile(os.Getenv(envLog), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	f.Write(append(b, '\n'))
}

// refuse rejects a call the real tool would not get from a correct lever: logged, exit 97.
func refuse(c call, format string, a ...any) int {
	c.Refused = fmt.Sprintf(format, a...)
	logCall(c)
	fmt.Fprintln(os.Stderr, "fake "+c.Tool+": refused: "+c.Refused)
	return 97
}

// record is one machine as `orb list --format json` prints it. The shape (id, name, image
// {distro, version, arch, variant}, config {isolated, ...}, builtin, state) follows
// OrbStack's output as captured from `orbctl info -f json` v2.2.3 (the record part) and
// the recorded scenarios in ../testdata/scenarios.
func (m machine) record(name string) string {
	state := "stopped"
	if m.Running {
		state = "running"
	}
	return fmt.Sprintf(`[{"id":"01JA0B1C2D3E4F5G6H7J8K9M0N","name":%q,"image":{"distro":"debian","version":"bookworm","arch":%q,"variant":"default"},"config":{"isolated":true,"forward_ssh_agent":false,"default_username":"dev"},"builtin":false,"state":%q}]`, name, m.Arch, state)
}

// fakeOrb answers orb's own commands from the machine record and runs guest commands
// (`-u USER -m MACHINE -w / ARGV...`) in the substrate: the exact argv is checked first.
func fakeOrb(args []string) int {
	c := call{Tool: "orb", Argv: args}
	name := os.Getenv(envMachine)
	m := loadMachine()
	eq := func(want ...string) bool { return slicesEqual(args, want) }
	switch {
	case eq("version"):
		logCall(c)
		fmt.Println("Version: 2.1.3 (2010300)\nCommit: 3c1d2e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d (v2.1.3)")
		return 0
	case eq("list", "--format", "json"):
		logCall(c)
		if !m.Exists {
			fmt.Println("[]")
		} else {
			fmt.Println(m.record(name))
		}
		return 0
	case eq("create", "--arch", runtime.GOARCH, "--isolated", "--mount", os.Getenv(envTree)+":/lever", "debian:bookworm", name):
		if m.Exists {
			return refuse(c, "machine %s already exists", name)
		}
		logCall(c)
		m.Exists, m.Running = true, true
		m.save()
		return 0
	case eq("start", name):
		logCall(c)
		m.Running = true
		m.save()
		return 0
	case eq("stop", name):
		logCall(c)
		powerOff()
		m.Running = false
		m.save()
		return 0
	case eq("delete", "--force", name):
		logCall(c)
		powerOff()
		m = machine{Arch: m.Arch}
		m.save()
		return 0
	case len(args) >= 7 && args[0] == "-u" && (args[1] == "root" || args[1] == "lever") && args[2] == "-m" && args[3] == name && args[4] == "-w" && args[5] == "/" && !strings.HasPrefix(args[6], "-"):
		return guestCommand(c, m, args[1], args[6:])
	}
	return refuse(c, "not a call lever makes: %q", args)
}

var headC = regexp.MustCompile(`head -c ([0-9]+) `)

// elfMachine names the architecture in an ELF header (e_machine at offset 18).
func elfMachine(b []byte) string {
	if len(b) < 20 || !bytes.HasPrefix(b, []byte("\x7fELF")) {
		return "not ELF"
	}
	switch binary.LittleEndian.Uint16(b[18:20]) {
	case 62:
		return "x86-64"
	case 183:
		return "aarch64"
	default:
		return "e_machine " + strconv.Itoa(int(binary.LittleEndian.Uint16(b[18:20])))
	}
}

func goarchELF(a string) string {
	return map[string]string{"amd64": "x86-64", "arm64": "aarch64"}[a]
}

// guestCommand runs argv in the substrate as user, with orb's clean environment, and
// passes stdin, stdout, stderr and the exit status through. A helper binary piped in on
// stdin (`head -c N >"$d/p"`) has its ELF machine recorded; one the machine cannot run
// gets the answer the machine's kernel would give.
func guestCommand(c call, m machine, user string, argv []string) int {
	if !m.Exists || !m.Running {
		logCall(c)
		fmt.Fprintf(os.Stderr, "machine %s is not running\n", os.Getenv(envMachine))
		return 1
	}
	stdin, _ := io.ReadAll(os.Stdin)
	if len(argv) == 3 && argv[0] == "/bin/sh" && argv[1] == "-c" {
		if sm := headC.FindStringSubmatch(argv[2]); sm != nil {
			n, _ := strconv.Atoi(sm[1])
			if n <= len(stdin) {
				c.HelperELF = elfMachine(stdin[:n])
				if c.HelperELF != goarchELF(m.Arch) {
					logCall(c)
					fmt.Fprintf(os.Stderr, "/bin/sh: 1: %s: Exec format error (a %s binary in a %s machine)\n", "p", c.HelperELF, m.Arch)
					return 126
				}
			}
		}
	}
	logCall(c)
	ns := []string{"--target", os.Getenv(envHolder), "--mount", "--pid", "--net=/run/netns/" + os.Getenv(envNetns), "--wd=/", "--",
		"env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
	if user != "root" {
		ns = append(ns, "runuser", "-u", user, "--")
	}
	cmd := exec.Command("nsenter", append(ns, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), os.Stdout, os.Stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	fmt.Fprintln(os.Stderr, "fake orb:", err)
	return 1
}

// powerOff is what stopping a machine does to what runs in it: every process but init is
// killed and the kernel's firewall state (per network namespace) is gone.
func powerOff() {
	h := os.Getenv(envHolder)
	exec.Command("nsenter", "--target", h, "--mount", "--pid", "--", "kill", "-9", "-1").Run()
	nsx := []string{"netns", "exec", os.Getenv(envNetns)}
	for _, t := range []string{"iptables", "ip6tables"} {
		exec.Command("ip", append(nsx, t, "-P", "OUTPUT", "ACCEPT")...).Run()
		exec.Command("ip", append(nsx, t, "-F")...).Run()
		exec.Command("ip", append(nsx, t, "-X")...).Run()
	}
	exec.Command("ip", append(nsx, "nft", "flush", "ruleset")...).Run()
}

// fakeSSH is OpenSSH as lever drives it against OrbStack's server: the exact argv of the
// four forms lever uses, each written out here, and nothing else.
func fakeSSH(args []string) int {
	c := call{Tool: "ssh", Argv: args}
	cfg := filepath.Join(os.Getenv("HOME"), ".orbstack", "ssh", "config")
	ctl := filepath.Join(os.Getenv(envStateD), "orb-ssh.ctl")
	dest := "lever@" + os.Getenv(envMachine) + "@orb"
	base := []string{"-F", cfg, "-o", "LogLevel=ERROR", "-o", "ControlPath=" + ctl}
	form := func(mid ...string) bool {
		return slicesEqual(args, append(append(append([]string{}, base...), mid...), dest))
	}
	master := []string{"-o", "ControlMaster=yes", "-o", "ControlPersist=yes",
		"-o", "ExitOnForwardFailure=yes", "-o", "StreamLocalBindMask=0177", "-o", "StreamLocalBindUnlink=yes",
		"-o", "ForwardAgent=no", "-o", "ForwardX11=no", "-o", "BatchMode=yes", "-f", "-N"}
	switch {
	case form(master...):
		logCall(c)
		if _, err := os.Stat(cfg); err != nil {
			fmt.Fprintf(os.Stderr, "Can't open user config file %s: No such file or directory\n", cfg)
			return 255
		}
		if m := loadMachine(); !m.Exists || !m.Running {
			fmt.Fprintf(os.Stderr, "machine %s is not running\n", os.Getenv(envMachine))
			return 255
		}
		if _, err := os.Stat(ctl); err == nil {
			// OpenSSH would disable multiplexing and carry on without a master: lever must
			// remove a stale control socket first.
			fmt.Fprintf(os.Stderr, "ControlSocket %s already exists, disabling multiplexing\n", ctl)
			return 98
		}
		self, _ := os.Executable()
		d := exec.Command(self)
		d.Env = append(os.Environ(), fakeEnv+"=master")
		d.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := d.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 255
		}
		// Up to 20 s: the master is this test binary started afresh, which a loaded
		// machine can take seconds to bring up.
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
			if _, err := os.Stat(ctl); err == nil {
				return 0
			}
			time.Sleep(20 * time.Millisecond)
		}
		fmt.Fprintln(os.Stderr, "fake ssh: master did not start")
		return 255
	case form("-O", "check"), form("-O", "exit"):
		logCall(c)
		return mux(ctl, args[len(base)+1])
	case len(args) == len(base)+5 && form("-O", "forward", "-L", args[len(base)+3]):
		logCall(c)
		h, g, ok := strings.Cut(args[len(base)+3], ":")
		if !ok || !filepath.IsAbs(h) || !filepath.IsAbs(g) {
			return refuse(c, "bad -L %q", args[len(base)+3])
		}
		return mux(ctl, "forward "+h+" "+g)
	}
	return refuse(c, "not a call lever makes: %q", args)
}

// mux sends one request to the fake master, as `ssh -O` does over the control socket.
func mux(ctl, req string) int {
	conn, err := net.Dial("unix", ctl)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Control socket connect(%s): No such file or directory\n", ctl)
		return 255
	}
	defer conn.Close()
	fmt.Fprintln(conn, req)
	line, _ := bufio.NewReader(conn).ReadString('\n')
	if strings.TrimSpace(line) != "ok" {
		fmt.Fprint(os.Stderr, line)
		return 255
	}
	return 0
}

// sshMaster is the ControlMaster: it holds the forwards, each a host unix socket (0600,
// replacing a stale file) whose connections it carries to the guest socket, reached
// through the substrate init's root (/proc/<pid>/root), as sshd in the machine would.
func sshMaster() int {
	ctl := filepath.Join(os.Getenv(envStateD), "orb-ssh.ctl")
	os.WriteFile(filepath.Join(os.Getenv(envStateD), "fake-master.pid"), []byte(strconv.Itoa(os.Getpid())), 0o600)
	syscall.Umask(0o177)
	l, err := net.Listen("unix", ctl)
	if err != nil {
		return 1
	}
	var held []net.Listener
	have := map[string]bool{}
	for {
		conn, err := l.Accept()
		if err != nil {
			return 1
		}
		line, _ := bufio.NewReader(conn).ReadString('\n')
		f := strings.Fields(line)
		switch {
		case len(f) == 1 && f[0] == "check":
			fmt.Fprintln(conn, "ok")
		case len(f) == 1 && f[0] == "exit":
			fmt.Fprintln(conn, "ok")
			conn.Close()
			for _, h := range held {
				h.Close()
			}
			l.Close()
			os.Remove(ctl)
			return 0
		case len(f) == 3 && f[0] == "forward":
			if have[f[1]+" "+f[2]] {
				fmt.Fprintln(conn, "ok")
				break
			}
			os.Remove(f[1]) // StreamLocalBindUnlink=yes
			hl, err := net.Listen("unix", f[1])
			if err != nil {
				fmt.Fprintf(conn, "forward failed: %v\n", err)
				break
			}
			have[f[1]+" "+f[2]] = true
			held = append(held, hl)
			go carry(hl, "/proc/"+os.Getenv(envHolder)+"/root"+f[2])
			fmt.Fprintln(conn, "ok")
		default:
			fmt.Fprintf(conn, "bad request %q\n", line)
		}
		conn.Close()
	}
}

// masterLog notes a forward's trouble beside the call log, for the test to show.
func masterLog(format string, a ...any) {
	f, err := os.OpenFile(os.Getenv(envLog)+".master", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, time.Now().Format("15:04:05.000 ")+format+"\n", a...)
}

func carry(l net.Listener, guest string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			g, err := net.Dial("unix", guest)
			if err != nil {
				masterLog("dial %s: %v", guest, err)
				return
			}
			defer g.Close()
			// As ssh does with a channel: each direction's end is passed on as EOF
			// (half-close), so a request already written when the other side closes is not
			// lost in a reset.
			done := make(chan struct{})
			go func() {
				if _, err := io.Copy(g, c); err != nil {
					masterLog("client to guest: %v", err)
				}
				g.(*net.UnixConn).CloseWrite()
				close(done)
			}()
			io.Copy(c, g)
			c.(*net.UnixConn).CloseWrite()
			<-done
		}()
	}
}

// substrateInit is pid 1 of the guest substrate (started by `unshare --pid --fork --mount
// --mount-proc`): it makes the machine's private view (its own /etc with no run user yet,
// /home, /run/user, /var/lib/lever, the tree at /lever, and the host's /tmp, /root, /work
// and /opt hidden, as an isolated machine sees none of the Mac's files), says ready, and
// reaps orphans as an init does.
func substrateInit() int {
	root, tree := os.Getenv(envRoot), os.Getenv(envTree)
	bind := func(src, dst string) error { return syscall.Mount(src, dst, "", syscall.MS_BIND|syscall.MS_REC, "") }
	steps := []func() error{
		func() error { return bind(filepath.Join(root, "etc"), "/etc") },
		func() error { return bind(filepath.Join(root, "home"), "/home") },
		func() error { return bind(filepath.Join(root, "varlib"), "/var/lib/lever") },
		func() error { return bind(tree, "/lever") },
		func() error { return syscall.Mount("tmpfs", "/run/user", "tmpfs", 0, "mode=0755") },
	}
	for _, d := range []string{"/tmp", "/root", "/work", "/opt"} {
		d := d
		if _, err := os.Stat(d); err == nil {
			steps = append(steps, func() error { return syscall.Mount("tmpfs", d, "tmpfs", 0, "mode=1777") })
		}
	}
	for i, s := range steps {
		if err := s(); err != nil {
			fmt.Printf("mount step %d: %v\n", i, err)
			return 1
		}
	}
	fmt.Println("ready")
	os.Stdout.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { <-sig; os.Exit(0) }()
	for {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &ws, 0, nil); err != nil {
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
