# The wrapper's end. The capture is tested by its path (a plain stat) and opened for reading only
# when it holds output (a call without output opens one file, not two). A file a concurrent sweep
# already unlinked is always encoded, reopened through /dev/fd/3 (two lookups through /proc: only
# then). The wrapper's own tools run with LC_ALL=C: loading a UTF-8 locale costs each of them about a
# third of its start-up; the user's command keeps its locale. ENCODER is replaced by base64 (or a
# python3 one-liner where the image has none). A capture that held output is emptied at once (a
# builtin).
# A sweeping call ($8 = its span n, every n-th call) works in the background once the answer is
# written, off the critical path: it removes the files of calls $7-2n to $7-n-1 (so every file goes
# exactly once, with any a killed wrapper left; an unlinked file stays readable to a call still
# running, and no number below $7 is ever created again) and creates those of the next 2n calls.
if [ -s "$3/$6.$7" ]; then
  { command exec 4<"$3/$6.$7" || command exec 4</dev/fd/3; } 2>/dev/null
  LC_ALL=C head -c "$2" <&4 | ENCODER; true 2>/dev/null >"$3/$6.$7"
elif ! [ -e "$3/$6.$7" ] && { command exec 4</dev/fd/3; } 2>/dev/null; then
  LC_ALL=C head -c "$2" <&4 | ENCODER
fi
[ -z "$8" ] || {
  sd=$3/$6. si=$(($7 - 2 * $8)) sj=$(($7 - $8)) sk=$7 se=$(($7 + 2 * $8))
  {
    set --
    while [ "$si" -lt "$sj" ]; do [ "$si" -lt 1 ] || set -- "$@" "$sd$si"; si=$((si + 1)); done
    [ $# = 0 ] || LC_ALL=C rm -f "$@"
    while [ "$sk" -lt "$se" ]; do sk=$((sk + 1)); true >>"$sd$sk"; done
  } >/dev/null 2>&1 </dev/null &
}
