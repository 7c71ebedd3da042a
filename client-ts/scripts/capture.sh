# The user-command wrapper's start: $0 sh, $1 timeout s, $2 capture byte cap (max+1), $3 staging
# dir, $4 command, $5 cwd ("" = base), $6 this client's capture name, $7 this call's number (the
# client counts its calls), $8 "" or, on a sweeping call, the sweep's span (see encode.sh).
#
# Every process costs about as much as the whole bare `sh -c true` request, so the wrapper spawns
# none on the common path: `head | base64` only for output. The output goes to a capture file (so
# the real exit code survives and any bytes can be base64-encoded afterwards), opened on fd 3 for
# the command; encode.sh opens it for reading back only when it holds output. Its name ends in the
# call's number, so each call gets a fresh inode (a background job the command leaves behind keeps
# writing to its own file, never into a later call's). Creating a file costs a journalled metadata write (0.4 to 0.7 ms measured on
# ext4, as much as the rest of the call): a sweeping call creates the next calls' files in the
# background, so a call only opens an existing empty file (it creates its own when that has not
# happened). Nothing is unlinked here either: encode.sh empties the file and the sweeps remove it.
# Each file operation costs gVisor about ten times what it costs runc (it crosses to the gofer), so
# the staging dir is made only when the open fails. `command exec` reports a failed redirect instead
# of exiting the shell; the command does not get the descriptor.
if [ -n "$5" ] && ! cd "$5" 2>/dev/null && ! { mkdir -p "$5" 2>/dev/null && cd "$5"; }; then
  echo "@LKC! cwd"; exit 0
fi
if ! { command exec 3>"$3/$6.$7"; } 2>/dev/null && ! { mkdir -p "$3" 2>/dev/null && { command exec 3>"$3/$6.$7"; } 2>/dev/null; }; then
  echo "@LKC! capture"; exit 0
fi
