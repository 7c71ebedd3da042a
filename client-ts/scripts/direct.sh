# A user command without a watchdog (the runtime kills the whole process group at its limit first):
# RUNNER is replaced by a subshell of the wrapper, a fork without any exec, `eval`ed after `set --`,
# so it sees what `sh -c` would give it: $0 `sh`, no positional parameters, no wrapper variables,
# no stdin (or by its own `sh` when the command mentions $$, PPID or LINENO). A subshell keeps
# `exit`, `set -e`, traps and `cd` to itself. The wrapper traps the catchable signals (its children
# get the default actions back), so a command that signals its whole process group is reported.
trap : HUP INT QUIT TERM USR1 USR2 ALRM
. ./capture.sh
RUNNER >&3 2>&1 </dev/null 3>&-
echo "@LKC $? - -"
. ./encode.sh
