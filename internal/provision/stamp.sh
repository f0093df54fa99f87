# shellcheck shell=sh
# read_stamp STAMP: the boot id, the stamp's owner uid and mode ("none" when it is
# missing) and its contents, one per line (provision.ParseState reads them). Used alone by
# provision.ReadCmd and inside bring-up's observation call.
read_stamp() {
	# read, not cat: one process less in every warm up's observation (boot_id is a string
	# sysctl, which answers reads at any offset; an integer one would not)
	read -r boot </proc/sys/kernel/random/boot_id && echo "$boot"
	stat -c '%u %a' "$1" 2>/dev/null || echo none
	# and the stamp's lines read by the shell too (no cat): one process less again
	{ while IFS= read -r sl || [ -n "$sl" ]; do printf '%s\n' "$sl"; done; } 2>/dev/null <"$1" || true
}
