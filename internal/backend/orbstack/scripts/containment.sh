# shellcheck shell=sh
# OrbStack's containment check (backend.Containment), a part of a guest.Script after the
# sections prelude: every mount's target and type (findmnt -r escapes blanks), and whether
# the Mac's file sharing is visible (/mnt/mac exists only in a machine that is not
# isolated). Read-only.
sec containment.mounts findmnt -rn -o TARGET,FSTYPE
if [ -e /mnt/mac ]; then put containment.mac yes; else put containment.mac no; fi
