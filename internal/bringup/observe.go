package bringup

import (
	"context"
	"crypto/x509"
	_ "embed"
	"encoding/pem"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/levimage"
	"github.com/lever-jail/lever/internal/levimage/debroot"
	"github.com/lever-jail/lever/internal/provision"
)

//go:embed scripts/observe.sh
var observePart string

// ContainerState is what the observation saw of one planned container in podman.
type ContainerState string

const (
	ContainerRunning ContainerState = "running"
	ContainerStopped ContainerState = "stopped" // exists, not running (stopped, exited, created)
)

// Observed is what a read-only look at the host and guest found.
type Observed struct {
	GuestReachable bool
	// Egress: whether the snapshot read in the observation call (with the backend's
	// in-guest containment check) matches the desired ruleset; EgressErr says why it
	// could not be judged (the containment check's refusal among others). Only an
	// observation with egress reads it.
	EgressMatch bool
	EgressDiff  []string
	EgressErr   error
	// Snapshot is that snapshot, for the egress step (nil: none was read).
	Snapshot *guest.Snapshot
	// Egress is the verification report of Snapshot (nil: none).
	Egress        *guest.Report
	Stamp         provision.State
	StampCurrent  bool
	ServiceUp     bool
	BrokerRunning bool
	BrokerSANOK   bool
	// Enrolled: agent dir name -> holds a client certificate that certValid accepts
	// (chains to the current CA for client auth, a third of its lifetime and five minutes left).
	Enrolled map[string]bool
	// Settings: agent dir name -> its pushed lev settings match the host's and its lev
	// home and bench dir exist.
	Settings     map[string]bool
	ImagePresent bool
	ImageRef     string
	// BenchPresent: the workbench (BenchRef, content-addressed) is there: its image in
	// podman, or the default workbench's tree among Trees.
	BenchPresent bool
	BenchRef     string
	// Trees are lever's trees in the guest (their names: lev's, the workbench's).
	Trees map[string]bool
	// HelperPresent: this lever's lev is installed in the (VM) guest, so the helper steps
	// need no install (a hint: a helper call that finds it gone installs it).
	HelperPresent bool
	// Containers: name -> ContainerRunning or ContainerStopped; absent when podman has no
	// such container. A changed spec hash is not seen here: the lev step's Ensure compares
	// it and recreates.
	Containers map[string]ContainerState
	// MountsAsked: the observation carried the proof of the running containers' in-tree
	// mounts (livemounts.go); MountsProven: the helper answered it, MountProofs then
	// naming each running container's verdict ("" proven, else why not); MountsErr: why
	// it did not answer.
	MountsAsked, MountsProven bool
	MountProofs               map[string]string
	// ChannelProofs: each running workbench's exec channel ("" it answered with this
	// start's proof, else why not), from the same helper.
	ChannelProofs map[string]string
	MountsErr     error
	// TreeChecked: the observation tried, as the run user, to create and remove a file in
	// the tree (the run user exists); TreeWritable is the outcome, TreeWriteErr what the
	// failed attempt said.
	TreeChecked, TreeWritable bool
	TreeWriteErr              string
	// Facts are what the observation found that the steps use: the run user's uid, the
	// package-state digest, the podman connection (when its service is up).
	Facts Facts
}

// observeScript is the observation call: observe.sh with the functions it uses and, when
// eg asks for one, the egress snapshot (containment check included) in the same call.
func (in *Instance) observeScript(eg *guest.SnapshotRequest) (guest.Script, guest.Cmd) {
	parts := []string{provision.StampPart, debroot.StateDigestPart, observePart}
	env := []string{"LEVER_TREES=" + in.treesRoot()}
	if in.TreeSrc != "" {
		env = append(env, "LEVER_TREE_PROBE="+in.TreeSrc)
	}
	if p := in.helperPath(); p != "" {
		env = append(env, "LEVER_HELPER="+p)
	}
	if part, menv := in.liveMountsPart(); part != "" {
		parts = append(parts[:2], part, observePart)
		env = append(env, menv...)
	}
	if eg != nil {
		parts = append(parts, guest.SnapshotParts(*eg)...)
		env = append(env, guest.SnapshotEnv(*eg)...)
	}
	sc := guest.NewScript(append(parts, "exit 0")...)
	args := append([]string{in.provP.WithDefaults().Stamp, in.RunUser, in.levHomeRoot()}, in.Agents()...)
	return sc, sc.Cmd(env, args...)
}

// Observe looks without changing anything: one guest call (when the guest is reachable),
// the broker's state file, and the podman socket. It reads no egress state (the host
// commands that attach to a running jail use it). On an Instance from New alone (Attach)
// it reports the guest, the podman service and the containers; what it judges against
// Prepare's facts (the images, the settings' digest) reads as absent.
func (in *Instance) Observe(ctx context.Context) Observed { return in.observe(ctx, nil) }

// ObserveWithEgress is Observe with the egress snapshot and the backend's in-guest
// containment check read in the same guest call, and judged: what up's dry run and status
// look at, the whole view (nft's too), as a report needs. Still one guest call. (Up's own
// observation asks for guest.EgressSpec.RebuildRequest: its egress step rebuilds on any
// drift, so a guest with no chain is read short.)
func (in *Instance) ObserveWithEgress(ctx context.Context) Observed {
	in.mustBePrepared("ObserveWithEgress")
	req := in.Spec.SnapshotRequest()
	return in.observe(ctx, &req)
}

// observe makes the observation call, with the egress snapshot eg asks for (nil: none).
func (in *Instance) observe(ctx context.Context, eg *guest.SnapshotRequest) Observed {
	o := Observed{Enrolled: map[string]bool{}, Settings: map[string]bool{}, Containers: map[string]ContainerState{}, ImageRef: in.imageRef, Trees: map[string]bool{}}
	o.Facts.ImageRef = in.imageRef
	sc, cmd := in.observeScript(eg)
	res, err := in.Runner.Run(ctx, cmd)
	if err != nil || res.ExitCode != 0 {
		return o
	}
	secs, err := sc.Parse(res.Stdout)
	if err != nil {
		return o
	}
	o.GuestReachable = true
	if o.MountsAsked = cmdHasEnv(cmd, "LEVER_MOUNTS_REQ="); o.MountsAsked {
		readLiveMounts(secs, &o)
	}
	o.Stamp = provision.ParseState([]byte(secs["stamp"].Out))
	o.StampCurrent = o.Stamp.Current(in.provP)
	if uid, err := strconv.Atoi(strings.TrimSpace(secs["uid"].Out)); err == nil {
		o.Facts.UID = uid
	}
	o.ServiceUp = strings.TrimSpace(secs["podman"].Out) == "up"
	if sum := strings.TrimSpace(secs["statussum"].Out); len(sum) == 64 {
		o.Facts.StatusSum = sum
	}
	for _, t := range strings.Fields(secs["trees"].Out) {
		o.Trees[t] = true
	}
	o.HelperPresent = strings.TrimSpace(secs["helper"].Out) == "present"
	if secs.Has("treewrite") {
		out := strings.TrimSpace(secs["treewrite"].Out)
		o.TreeChecked, o.TreeWritable = true, out == "ok"
		if !o.TreeWritable {
			o.TreeWriteErr = out
		}
	}
	caPEM, _ := os.ReadFile(brokerctl.CAPath(in.cfg.StateDir()))
	for _, a := range in.Agents() {
		cert := secs["cert."+a]
		o.Enrolled[a] = cert.RC == 0 && certValid([]byte(cert.Out), caPEM)
		set := secs["settings."+a]
		o.Settings[a] = set.RC == 0 && strings.TrimSpace(set.Out) == in.settingsHash && strings.TrimSpace(secs["dirs."+a].Out) == "ok"
	}
	if eg != nil {
		in.judgeEgress(secs, *eg, &o)
	}
	if bs, err := in.broker.Status(); err == nil && bs.Running {
		o.BrokerRunning = true
		switch {
		case bs.State == nil:
		case o.Facts.AliasV4 != "":
			o.BrokerSANOK = contains(bs.State.SANIPs, o.Facts.AliasV4)
		default:
			// no alias known (an observation without egress): any SAN will do for now;
			// the broker step checks the alias itself.
			o.BrokerSANOK = len(bs.State.SANIPs) > 0
		}
	}
	if o.ServiceUp && o.Facts.UID > 0 {
		if c, err := in.podman.Dial(ctx, o.Facts.UID); err == nil {
			o.Facts.Podman = c
			switch in.source.Kind {
			case levimage.Built:
				o.ImagePresent = o.Trees[filepath.Base(in.levTree())]
			case levimage.Configured:
				o.ImagePresent, _ = c.ImageExists(in.imageRef)
			}
			// (a tarball's name is known only once loaded, so the plan says it loads it;
			// the image step finds it)
			if ref, err := in.benchKnownRef(c, o.Facts); err == nil && ref != "" {
				o.BenchRef = ref
				o.BenchPresent, _ = in.benchPresent(c, o, ref)
			}
			if cs, err := c.List(in.cfg.Name); err == nil {
				for _, s := range cs {
					if s.Running {
						o.Containers[s.Name] = ContainerRunning
					} else {
						o.Containers[s.Name] = ContainerStopped
					}
				}
			}
		}
	}
	return o
}

// judgeEgress reads the snapshot sections of an observation and verifies them (the
// containment check first): no guest call.
func (in *Instance) judgeEgress(secs guest.Sections, req guest.SnapshotRequest, o *Observed) {
	snap, err := guest.ParseSnapshot(secs, req)
	if err != nil {
		o.EgressErr, o.EgressDiff = err, []string{err.Error()}
		return
	}
	o.Snapshot = &snap
	rep, err := guest.VerifySnapshot(in.Spec, snap)
	if err != nil {
		o.EgressErr, o.EgressDiff = err, []string{err.Error()}
		return
	}
	o.Egress = &rep
	o.EgressMatch, o.EgressDiff = rep.Diff.Match(), rep.Lines
	o.Facts.AliasV4, o.Facts.AliasV6 = rep.Desired.AliasV4, rep.Desired.AliasV6
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// certValid: the PEM is a certificate that chains to the current CA (caPEM) for client
// authentication and has at least a third of its lifetime and at least five minutes left;
// an older one is renewed by the enrol step before it lapses mid-run.
func certValid(certPEM, caPEM []byte) bool {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return false
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return false
	}
	left, life := time.Until(c.NotAfter), c.NotAfter.Sub(c.NotBefore)
	if left < 5*time.Minute || left < life/3 {
		return false
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return false
	}
	_, err = c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}

// cmdHasEnv says whether cmd (a guest.Script's) sets a variable with prefix.
func cmdHasEnv(cmd guest.Cmd, prefix string) bool {
	for _, a := range cmd.Argv {
		if a == "sh" {
			return false
		}
		if strings.HasPrefix(a, prefix) {
			return true
		}
	}
	return false
}
