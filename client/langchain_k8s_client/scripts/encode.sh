# The wrapper's end. The capture is tested by its path (a plain stat; /dev/fd/4 costs two lookups
# through /proc); a file a concurrent sweep already unlinked is always encoded, through fd 4. The
# wrapper's own tools run with LC_ALL=C: loading a UTF-8 locale costs each of them about a third of
# its start-up; the user's command keeps its locale. ENCODER is replaced by base64 (or a python3
# one-liner where the image has none). A capture that held output is emptied at once (a builtin);
# with $7 the client's capture files (its earlier calls', and any a killed wrapper left) go in a
# background `rm` once the answer is written, off the critical path (an unlinked file stays
# readable to a call still running).
if [ -s "$3/$6.$$" ] || ! [ -e "$3/$6.$$" ]; then
  LC_ALL=C head -c "$2" <&4 | ENCODER; true 2>/dev/null >"$3/$6.$$"
fi
[ -z "$7" ] || { LC_ALL=C rm -f "$3/$6".* >/dev/null 2>&1 & }
