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
	# one cat for both files (a missing bundle adds nothing), and no cut: a process costs
	# 0.1-0.2 s under emulation, and the observation of every warm up runs this
	sd=$( { cat /var/lib/dpkg/status /etc/ssl/certs/ca-certificates.crt 2>/dev/null; find /etc/alternatives -maxdepth 1 -type l -printf '%f %l\n' 2>/dev/null | LC_ALL=C sort; } | sha256sum)
	echo "${sd%% *}"
}
