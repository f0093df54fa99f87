# shellcheck shell=sh
# The egress snapshot (guest.TakeSnapshot): both families' filter tables, the host alias
# looked up under the chains as they are, Lima's LIMADNS chain when asked, the nft view
# of the tables, in one call (the backend's containment part, when asked, follows this
# part in the same script: guest.SnapshotParts). Inputs (environment):
#   LEVER_IPT, LEVER_IP6T  the iptables binaries to list with
#   LEVER_ALIAS            the host alias name
#   LEVER_LIMADNS          1: read LIMADNS
#   LEVER_RTKEY            the remembered round-trip key (- for none)
#   LEVER_READBACK         1: the rebuild's read-back (guest.rebuildScript), in the call that
#                          already judged the alias, LIMADNS and containment: the tables only
#   LEVER_SHORT            1: the caller rebuilds on any drift (bring-up, egress apply); a
#                          guest whose tables both list and hold no LEVER_EGRESS chain is
#                          then answered without the nft view (section chainless, below)
# Under emulation every process costs 0.1-0.2 s, so each one here is counted: the variant is
# asked once, one lookup answers both families, and the round-trip key is one sha256sum
# over what the script already holds (docs/bringup.md counts them).
# shellcheck disable=SC2154 # rc and V are set by secv (sections.sh)
secv filter4 "$LEVER_IPT" -w -S; r4=$rc; t4=$V
secv filter6 "$LEVER_IP6T" -w -S; r6=$rc; t6=$V
# Under the closed chain DNS is dropped by design and a resolver would retry for tens of
# seconds: bound each lookup (coreutils timeout, when present) and fall back to reading
# the aliases from the live chains.
to() { if command -v timeout >/dev/null 2>&1; then timeout 8 "$@"; else "$@"; fi; }
nl='
'
if [ "${LEVER_READBACK:-0}" != 1 ]; then
	# One lookup for both families (getent ahosts), split here by address into the
	# sections alias4 and alias6, as getent ahostsv4 and ahostsv6 would answer them (exit 2
	# when a family has no address; ahostsv6's IPv4-mapped answers, which the host ignores,
	# are not made up): two processes fewer than a lookup per family.
	A=$(to getent ahosts "$LEVER_ALIAS" 2>"$E"); arc=$?
	a4=; a6=
	set -f; oifs=$IFS; IFS=$nl
	for l in $A; do
		case ${l%%[[:space:]]*} in *:*) a6=$a6$nl$l ;; *.*) a4=$a4$nl$l ;; esac
	done
	IFS=$oifs; set +f
	r4a=$arc; [ -n "$a4" ] || [ "$arc" != 0 ] || r4a=2
	r6a=$arc; [ -n "$a6" ] || [ "$arc" != 0 ] || r6a=2
	putrc alias4 "$r4a" "${a4#"$nl"}"
	# shellcheck disable=SC2034 # n names the section errsec (sections.sh) writes stderr under
	n=alias4
	errsec
	putrc alias6 "$r6a" "${a6#"$nl"}"
	if [ "$LEVER_LIMADNS" = 1 ]; then sec limadns "$LEVER_IPT" -w -t nat -S LIMADNS; fi
fi
# Both chains missing (a guest just booted) is drift whatever else the tables hold: the
# caller that asked for LEVER_SHORT rebuilds both, and the rebuild's read-back reads the nft
# view, the round trip and the foreign rules of the tables that count. The part below (a
# dozen processes, ~2 s under emulation) is then skipped. A listing that failed (a table
# iptables cannot translate) is never short: the nft view is all that can read it.
short=${LEVER_SHORT:-0}
[ "$r4$r6" = 00 ] || short=0
# any mention of the chain (however iptables spells its line) reads the whole view
case "$t4$nl$t6" in *LEVER_EGRESS*) short=0 ;; esac
if [ "$short" = 1 ]; then put chainless; else
# On the nf_tables variant, iptables -S is a translation that can miss or misprint a rule
# written with nft: read each family's filter table with nft as well, and the round trip
# of its iptables-save through a scratch network namespace (unshare -n: nothing live is
# written), for egress.CrossCheck. Legacy iptables has no nft view.
v=$("$LEVER_IPT" -V 2>/dev/null); put variant "$v"
case "$v" in
*nf_tables*)
	if command -v nft >/dev/null 2>&1; then
		secv nft nft -j list ruleset; nj=$V
		sec nfttext nft -a list ruleset
		# The round trip's key: what it is made from, the tables as iptables lists them
		# (the listings above and their exit statuses: the same rules iptables-nft-save
		# would write, without its counters) and the versions of the tools that make it, iptables' (-V above;
		# iptables-nft-restore is the same program) and nft's, read from the metainfo that
		# opens nft's JSON (nft -v only when that is missing). One process (sha256sum)
		# where a save per family, the version calls and sed took seven.
		nv=${nj#*'"version": "'}
		if [ "$nv" != "$nj" ]; then nv=${nv%%'"'*}; else nv=$(nft -v); fi
		k=$(printf '%s\n' "nft $nv" "$v" "$r4 $r6" "$t4" "$t6" | sha256sum); k=${k%% *}
		put rtkey "$k"
		if [ "$k" != "$LEVER_RTKEY" ]; then
			iptables-nft-save -t filter >"$E.4" 2>/dev/null; ip6tables-nft-save -t filter >"$E.6" 2>/dev/null
			# shellcheck disable=SC2016 # $1 and $2 are the inner shell's
			sec rt unshare -n sh -c 'iptables-nft-restore -w <"$1" && ip6tables-nft-restore -w <"$2" && nft -j list ruleset' sh "$E.4" "$E.6"
		fi
		# (the prelude's trap removes $E.4 and $E.6: no rm here)
	else put nft-missing; fi ;;
*)
	# A legacy guest's kernel runs nf_tables rules beside the legacy tables: read them for
	# rules that move packets past LEVER_EGRESS (egress.ForeignRedirects).
	if command -v nft >/dev/null 2>&1; then
		sec nft nft -j list ruleset
		sec nfttext nft -a list ruleset
	fi ;;
esac
fi
