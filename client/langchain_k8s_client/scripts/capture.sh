# The user-command wrapper's start: $0 sh, $1 timeout s, $2 capture byte cap (max+1), $3 staging
# dir, $4 command, $5 cwd ("" = base).
#
# Every process costs about as much as the whole bare `sh -c true` request, so the wrapper spawns
# as few as it can: `rm` always, `head | base64` only for output. The output goes to a capture file
# (so the real exit code survives and any bytes can be base64-encoded afterwards), opened on fd 3
# for the command and fd 4 for reading back, then unlinked before the command can outlive the
# wrapper: a killed wrapper (the runtime's own timeout) leaves nothing behind. `command exec`
# reports a failed redirect instead of exiting the shell; the command gets neither descriptor.
if [ -n "$5" ] && ! cd "$5" 2>/dev/null && ! { mkdir -p "$5" 2>/dev/null && cd "$5"; }; then
  echo "@LKC! cwd"; exit 0
fi
[ -d "$3" ] || mkdir -p "$3" 2>/dev/null
# shellcheck disable=SC2094  # fd 3 writes the capture, fd 4 reads it back: on purpose
if ! { command exec 3>"$3/o.$$" 4<"$3/o.$$"; } 2>/dev/null; then
  rm -f "$3/o.$$" 2>/dev/null; echo "@LKC! capture"; exit 0
fi
