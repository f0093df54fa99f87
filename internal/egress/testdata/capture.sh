#!/bin/sh
# Captures `iptables -S` / `ip6tables -S` listings from REAL iptables-nft and
# iptables-legacy, for the parser tests. Run as root from internal/egress:
#   sh testdata/capture.sh
# Every listing is taken inside a throwaway network namespace (lvt-e-cap-*), never in the
# root namespace (reading legacy tables there would create them for good). The rulesets
# loaded are the golden restore files under testdata/render, so the captures prove that
# the rendered text is exactly what iptables prints back.
set -eu
cd "$(dirname "$0")"
out=captured
ns=lvt-e-cap-$$
trap 'ip netns del $ns 2>/dev/null || true' EXIT INT TERM
fresh() { ip netns del $ns 2>/dev/null || true; ip netns add $ns; }
x() { ip netns exec $ns "$@"; }

for v in nft legacy; do
	mkdir -p $out/$v
	ipt=iptables-$v ip6t=ip6tables-$v
	# A namespace that never saw lever: no chain, no jump.
	fresh
	x $ipt -w -S >$out/$v/fresh.v4
	x $ip6t -w -S >$out/$v/fresh.v6
	for f in render/*.v4.restore; do
		c=$(basename "$f" .v4.restore)
		fresh
		x $ip6t-restore -w --noflush <render/$c.v6.restore
		x $ipt-restore -w --noflush <render/$c.v4.restore
		x $ip6t-restore -w --noflush <render/jump-none.restore
		x $ipt-restore -w --noflush <render/jump-none.restore
		x $ipt -w -S >$out/$v/$c.v4
		x $ip6t -w -S >$out/$v/$c.v6
	done
	# Tampered: a rule ahead of the jump, a second jump, a rule deleted, one added, one
	# changed (IPv4); IPv6 untouched.
	fresh
	x $ip6t-restore -w --noflush <render/open-v4v6-ports.v6.restore
	x $ipt-restore -w --noflush <render/open-v4v6-ports.v4.restore
	x $ip6t-restore -w --noflush <render/jump-none.restore
	x $ipt-restore -w --noflush <render/jump-none.restore
	x $ipt -w -I OUTPUT 1 -d 198.51.100.7/32 -j ACCEPT
	x $ipt -w -A OUTPUT -j LEVER_EGRESS
	x $ipt -w -D LEVER_EGRESS 2
	x $ipt -w -A LEVER_EGRESS -d 198.51.100.7/32 -j ACCEPT
	x $ipt -w -R LEVER_EGRESS 1 -d 10.77.0.1/32 -p tcp -m tcp --dport 3001 -j ACCEPT
	x $ipt -w -S >$out/$v/tampered.v4
	x $ip6t -w -S >$out/$v/tampered.v6
	# Lima's resolver DNAT chain, as Lima's guest sets it up.
	x $ipt -w -t nat -N LIMADNS
	x $ipt -w -t nat -A LIMADNS -d 192.168.5.3/32 -p udp --dport 53 -j DNAT --to-destination 192.168.5.2:35845
	x $ipt -w -t nat -A LIMADNS -d 192.168.5.3/32 -p tcp --dport 53 -j DNAT --to-destination 192.168.5.2:35845
	x $ipt -w -t nat -S LIMADNS >$out/$v/limadns.nat
done
echo "captured into $(pwd)/$out"
