# Arguments: target, confinement root or "". The symlink itself is what `rm` removes, so confinement
# checks the link's own location, not its target.
. ./prelude.sh
if [ -n "$2" ]; then
  p=${1%/*}; [ -n "$p" ] || p=/
  phys "$p" || { echo "@X invalid_path"; exit 0; }; t=$PH/${1##*/}
  phys "$2" || { echo "@X invalid_path"; exit 0; }
  inside "$t" "$PH" || { echo "@X invalid_path"; exit 0; }
fi
[ -e "$1" ] || [ -L "$1" ] || { echo "@X $(why "$1")"; exit 0; }
if rm -rf "$1"; then echo "@X ok"; else echo "@X permission_denied"; fi
