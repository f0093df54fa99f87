# shellcheck shell=sh
# read_stamp STAMP: the boot id, the stamp's owner uid and mode ("none" when it is
# missing) and its contents, one per line (provision.ParseState reads them). Used alone by
# provision.ReadCmd and inside bring-up's observation call.
read_stamp() {
	cat /proc/sys/kernel/random/boot_id
	stat -c '%u %a' "$1" 2>/dev/null || echo none
	cat "$1" 2>/dev/null || true
}
