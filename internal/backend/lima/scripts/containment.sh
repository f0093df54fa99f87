# shellcheck shell=sh
# Lima's containment check (backend.Containment), a part of a guest.Script after the
# sections prelude: every mount (findmnt -r escapes blanks), whether /dev/kvm is a
# character device, and the userns sysctl. Read-only. The bring-up facts call
# (scripts/facts.sh) runs this same part: the two never disagree on what a mount is.
sec containment.mounts findmnt -rn -o TARGET,FSTYPE,OPTIONS,SOURCE
if [ -c /dev/kvm ]; then put containment.kvm yes; else put containment.kvm no; fi
put containment.userns "$(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null || echo absent)"
