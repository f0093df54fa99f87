package bringup

import "fmt"

// Warnings before failures: the agents write the tree as the run user, and a tree that
// user cannot write (made by another user, or read-only) lets lever up succeed and the
// agent's first write fail with "permission denied". The observation tries a write as the
// run user (scripts/observe.sh, tree_write; no guest call of its own), and bring-up and
// status say what they found and how to fix it.

// treeWarning is the warning for obs when its probe found the tree not writable by the run
// user, naming the tree and the fix; "" when it is writable or was not tried.
func (in *Instance) treeWarning(obs Observed) string {
	if !obs.TreeChecked || obs.TreeWritable {
		return ""
	}
	tree := in.cfg.TreePath
	if in.InPlace {
		// The netns substrate: the run user is a user of this host, writing the host's tree.
		return fmt.Sprintf("the run user %s cannot write the tree %s (%q): the agents' writes there will fail with \"permission denied\"; fix: give %s the tree (chown -R %s %s), or run the jail as the tree's owner (LEVER_NETNS_RUN_USER=OWNER)",
			in.RunUser, tree, obs.TreeWriteErr, in.RunUser, in.RunUser, tree)
	}
	// A VM: the tree is this host's directory, shared into the guest at TreeSrc, and the
	// guest writes it with the host user's rights.
	return fmt.Sprintf("the run user %s cannot write the tree %s (in the guest %s: %q): the agents' writes there will fail with \"permission denied\"; fix: make the tree yours and writable on this host (chown -R \"$USER\" %s && chmod -R u+w %s)",
		in.RunUser, tree, in.TreeSrc, obs.TreeWriteErr, tree, tree)
}
