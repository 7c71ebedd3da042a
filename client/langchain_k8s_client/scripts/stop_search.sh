# Stop a GNU grep search at its time budget (the Python client's; scripts/grep.sh): SIGKILL to every
# process whose command line carries `lkc-<tag>`, the search's shell ($0) and its grep (--label);
# `head` ends when grep does, and the runtime answers -9 with what was found so far. Arguments: the
# tag's first character, then the rest: the pattern brackets the first one, so this script's own grep,
# whose command line holds the bracketed form, never matches itself. A search already over matches
# nothing. Run only when the budget is spent: a search costs no watchdog process (each process start
# costs gVisor about 2.7 times runc's; `timeout` was a quarter of a small search's time in the pod).
# shellcheck disable=SC2013  # the words are /proc/<pid>/cmdline paths: no blanks in them
for f in $(grep -lsa -e "lkc-[$1]$2" /proc/[0-9]*/cmdline); do
  p=${f#/proc/}
  kill -9 "${p%/cmdline}" 2>/dev/null
done
exit 0
