# shellcheck shell=sh
# Reads, in one guest call as root, everything debroot.Resolve needs: dpkg's status and
# native architecture, every package's file list, the root directory's symlinks, the
# alternatives database and links, and the generated certificate directory. Sections
# start with "@@lever " lines; no dpkg file line starts so (status fields start with a
# letter or a space, list lines with /). state_digest comes from statedigest.sh.
set -e
[ -f /var/lib/dpkg/status ] || { echo "no /var/lib/dpkg/status: not a Debian-family guest" >&2; exit 3; }
echo "@@lever arch"; dpkg --print-architecture
echo "@@lever statussum"; state_digest
echo "@@lever status"; cat /var/lib/dpkg/status
echo "@@lever lists"; find /var/lib/dpkg/info -maxdepth 1 -name '*.list' -type f -exec grep -H '' {} +
echo "@@lever rootlinks"; find / -mindepth 1 -maxdepth 1 -type l -printf '/%f\t%l\n'
echo "@@lever altlinks"; [ ! -d /etc/alternatives ] || find /etc/alternatives -mindepth 1 -maxdepth 1 -type l -printf '%f\t%l\n'
if [ -d /var/lib/dpkg/alternatives ]; then
	for f in /var/lib/dpkg/alternatives/*; do [ -f "$f" ] || continue; echo "@@lever alt ${f##*/}"; cat "$f"; done
fi
echo "@@lever certs"; [ ! -d /etc/ssl/certs ] || find /etc/ssl/certs
echo "@@lever end"
