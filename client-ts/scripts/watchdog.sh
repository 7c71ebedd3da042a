# shellcheck disable=SC2034  # `x` takes the rest of /proc/uptime
# A user command with an in-pod watchdog (the call's timeout is below the runtime's own limit).
# RUNNER is replaced by the watchdog, started in the background with the capture on fd 3:
# `timeout -s KILL` or a python3 one, running the command in its own `sh`; or, for a single simple
# command of plain words whose first word is no shell builtin and names a program (`command -v`, a
# builtin: else the `sh` says what is wrong), `timeout` runs the program itself, the words split
# and globbed here as that `sh` would (one `exec` fewer: each costs gVisor about 2.7 times runc's).
# `timeout` leads its own process group and kills all of it at the deadline. /proc/uptime gives the
# elapsed time without spawning a process, to tell a timeout kill from exit 137. `& wait` keeps
# dash's "Killed" job notice out of the captured output.
. ./capture.sh
read -r a x 2>/dev/null </proc/uptime
RUNNER
wait $!
e=$?
read -r b x 2>/dev/null </proc/uptime
echo "@LKC $e ${a:--} ${b:--}"
. ./encode.sh
