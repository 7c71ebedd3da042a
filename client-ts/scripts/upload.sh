# Move staged uploads into place. Arguments: triples (staging file, target, confinement root or "").
# `cat >` (not mv) writes through the existing inode, so a file keeps its mode and owner on overwrite
# like any write would; a symlink target is refused when confined (O_NOFOLLOW-like), a FIFO always.
. ./prelude.sh
up() {
if [ ! -f "$1" ]; then echo "@U upload_lost"; return; fi
if [ -d "$2" ]; then echo "@U is_directory"; return; fi
if [ -p "$2" ]; then echo "@U invalid_path"; return; fi
if [ -n "$3" ]; then
  if [ -L "$2" ]; then echo "@U invalid_path"; return; fi
  phys "$2" || { echo "@U invalid_path"; return; }; t=$PH
  phys "$3" || { echo "@U invalid_path"; return; }
  inside "$t" "$PH" || { echo "@U invalid_path"; return; }
fi
p=${2%/*}; [ -n "$p" ] || p=/
if [ ! -d "$p" ]; then
  c=$(why "$2"); [ "$c" = file_not_found ] || { echo "@U $c"; return; }
  mkdir -p "$p" || { echo "@U permission_denied"; return; }
fi
cat "$1" >"$2" || { echo "@U permission_denied"; return; }
echo "@U ok"; }
while [ $# -ge 3 ]; do up "$1" "$2" "$3"; rm -f "$1"; shift 3; done
