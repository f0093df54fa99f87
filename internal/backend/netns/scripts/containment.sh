# shellcheck shell=sh
# The netns substrate's containment check (backend.Containment), a part of a guest.Script
# after the sections prelude: the namespace's default routes, per family. Read-only.
sec containment.route4 ip -4 route show default
sec containment.route6 ip -6 route show default
