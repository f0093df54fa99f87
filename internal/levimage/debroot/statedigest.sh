# shellcheck shell=sh
# state_digest prints the sha256 of what the default workbench is made from beyond the
# package files: dpkg's status database, the CA bundle update-ca-certificates generated
# (a local CA added later changes it, not the status), and the alternatives links
# (update-alternatives --set changes only those). Nothing when there is no dpkg database.
# Bring-up's observation call runs this function and the image helper in the guest its
# Go twin (debroot.StateDigest, tested byte for byte against this text), so the tag a warm
# bring-up computes is the tag a build writes.
state_digest() {
	[ -f /var/lib/dpkg/status ] || return 0
	{ cat /var/lib/dpkg/status; cat /etc/ssl/certs/ca-certificates.crt 2>/dev/null; find /etc/alternatives -maxdepth 1 -type l -printf '%f %l\n' 2>/dev/null | LC_ALL=C sort; } | sha256sum | cut -d' ' -f1
}
