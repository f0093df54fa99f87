# shellcheck shell=sh
# The guest call the image helper's ReadInputs replaced, kept as the tests' reference
# (gather_test.go runs it on this machine and on fake roots, and ReadInputs must read
# exactly what its answer said). It read, in one guest call as root, everything
# debroot.Resolve needs, in the sections format (guest.Script): dpkg's native
# architecture and status, every package's file list, the root directory's symlinks, the
# alternatives database (a section alt.NAME per alternative) and links, and the
# generated certificate directory. state_digest comes from statedigest.sh. Exit 3
# (nothing printed) when the system has no dpkg database.
[ -f /var/lib/dpkg/status ] || { echo "no /var/lib/dpkg/status: not a Debian-family guest" >&2; exit 3; }
sec arch dpkg --print-architecture
sec statussum state_digest
sec status cat /var/lib/dpkg/status
sec lists find /var/lib/dpkg/info -maxdepth 1 -name '*.list' -type f -exec grep -H '' {} +
sec rootlinks find / -mindepth 1 -maxdepth 1 -type l -printf '/%f\t%l\n'
altlinks() { [ ! -d /etc/alternatives ] || find /etc/alternatives -mindepth 1 -maxdepth 1 -type l -printf '%f\t%l\n'; }
sec altlinks altlinks
if [ -d /var/lib/dpkg/alternatives ]; then
	for f in /var/lib/dpkg/alternatives/*; do [ -f "$f" ] || continue; sec "alt.${f##*/}" cat "$f"; done
fi
certs() { [ ! -d /etc/ssl/certs ] || find /etc/ssl/certs; }
sec certs certs
put end
