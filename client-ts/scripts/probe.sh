# Run once per (re)connection, as `sh -c <this> lkc .lkc-staging <token path>`. It learns the base dir (the
# runtime's cwd), the pod's name (the pod runner sets HOSTNAME to it), how to enforce timeouts, and
# sweeps staging files that a broken connection left behind; `wrappers=` lists the staged command
# wrappers. `grep=gnu`: grep() may use it.
# `group=1`: the probe leads its own session and process group, as the runtime (v1.0+) starts every command so that it can kill the
# whole group at its own limit; `limit=` is that limit's raw setting, parsed by probe.parse_probe
# exactly as the runtime parses it (`?` when it holds anything but letters, digits and `.+_-`, e.g.
# a line break or blanks: then the limit is treated as unknown).
d=$PWD/$1
mkdir -p "$d" 2>/dev/null
# shellcheck disable=SC3028  # HOSTNAME may be unset in POSIX sh: then the kernel's name is read
h=$HOSTNAME
[ -n "$h" ] || read -r h 2>/dev/null </proc/sys/kernel/hostname
echo @LKCP
echo "base=$PWD"
echo "host=$h"
if timeout -s KILL 5 true 2>/dev/null; then echo runner=timeout
elif command -v python3 >/dev/null 2>&1; then echo runner=python3
else echo runner=none; fi
command -v base64 >/dev/null 2>&1 && echo base64=1
case $(grep -V 2>/dev/null) in *GNU*) echo grep=gnu;; esac
if read -r s 2>/dev/null </proc/$$/stat; then
  s=${s##*) }
  # shellcheck disable=SC2086  # split /proc/$$/stat into fields (globbing off)
  (set -f; set -- $s; [ "$3" = $$ ] && [ "$4" = $$ ]) && echo group=1
fi
v=${SANDBOX_EXEC_TIMEOUT_SECONDS-300}
case $v in *[!0-9A-Za-z.+_-]*) echo "limit=?";; *) echo "limit=$v";; esac
# `sh=dash`: its messages never name a sourced file (bash's do), so wrappers may be staged. `-ef`
# compares inodes (dash, bash and BusyBox have it; a shell without it is simply not dash).
# shellcheck disable=SC3013
for x in /bin/dash /usr/bin/dash; do [ /proc/$$/exe -ef "$x" ] 2>/dev/null && { echo sh=dash; break; }; done
# The pod's own addresses: a pod name is unique only within its namespace, an IP in the cluster, so the
# client checks these hold the IP the session's status names. IPv4: the kernel's local routes
# (`/32 host LOCAL`; a shared loopback range is `/8 host LOCAL`); IPv6: the raw hex of if_inet6.
a=
p=
if [ -r /proc/net/fib_trie ]; then
  while read -r x y z _; do
    case $x in
      '|--') p=$y ;;
      /*) [ "$y $z" = "host LOCAL" ] && a="$a $p$x" ;;
    esac
  done </proc/net/fib_trie
fi
echo "v4=$a"
a=
if [ -r /proc/net/if_inet6 ]; then
  while read -r x _; do a="$a $x"; done </proc/net/if_inet6
fi
echo "v6=$a"
# The pod's identity token (agentsession_api.names.POD_IDENTITY_TOKEN_PATH, a projected ServiceAccount token
# the kubelet mints for this pod alone): the client verifies it before it sends the session anything.
t=
[ -r "$2" ] && read -r t <"$2" 2>/dev/null
[ -n "$t" ] && echo "idtoken=$t"
# The staged command wrappers (commands.UserCommand) stay: named by their content, shared by every
# client, never changed; a client whose wrapper went missing stages it again.
w=
for f in "$d"/w-*.sh; do [ -f "$f" ] && w="$w ${f##*/}"; done
echo "wrappers=$w"
find "$d" -type f -mmin +120 ! -name 'w-*.sh' -delete 2>/dev/null
exit 0
