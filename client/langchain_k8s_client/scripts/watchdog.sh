# shellcheck disable=SC2034  # `x` takes the rest of /proc/uptime
# A user command with an in-pod watchdog (the call's timeout is below the runtime's own limit).
# RUNNER is replaced by the watchdog (`timeout -s KILL` or a python3 one): `rm` runs while the
# command starts. /proc/uptime gives the elapsed time without spawning a process, to tell a timeout
# kill from exit 137. `& wait` keeps dash's "Killed" job notice out of the captured output.
. ./capture.sh
read -r a x 2>/dev/null </proc/uptime
RUNNER >&3 2>&1 </dev/null 3>&- 4<&- &
LC_ALL=C rm -f "$3/o.$$"
wait $!
e=$?
read -r b x 2>/dev/null </proc/uptime
echo "@LKC $e ${a:--} ${b:--}"
. ./encode.sh
