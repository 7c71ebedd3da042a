# Arguments: staging dir, token, inline max bytes, inline budget, then pairs (target, confinement
# root or ""). Small files come back inline as base64 (one round trip); bigger ones are hard-linked
# (else copied) into staging for GET /download, which only serves files under the base dir.
. ./prelude.sh
d=$1 k=$2 im=$3 bu=$4; shift 4; i=0; tot=0
dn() {
i=$((i+1))
if [ -n "$2" ]; then
  # shellcheck disable=SC2015  # readlink failing or printing nothing: both mean not found
  if [ -L "$1" ]; then f=$(readlink -f "$1") && [ -n "$f" ] || { echo "@D file_not_found"; return; }
  else phys "$1" || { echo "@D invalid_path"; return; }; f=$PH; fi
  phys "$2" || { echo "@D invalid_path"; return; }
  inside "$f" "$PH" || { echo "@D invalid_path"; return; }
fi
if [ -d "$1" ]; then echo "@D is_directory"; return; fi
if [ ! -e "$1" ]; then echo "@D $(why "$1")"; return; fi
if [ ! -f "$1" ]; then echo "@D invalid_path"; return; fi
if [ ! -r "$1" ]; then echo "@D permission_denied"; return; fi
n=$(wc -c <"$1") || { echo "@D permission_denied"; return; }
n=$((n+0))
if [ "$n" -le "$im" ] && [ $((tot+n)) -le "$bu" ]; then
  tot=$((tot+n)); echo "@D inline $n"; base64 <"$1" || echo "@D! read"
else
  s=$d/dn-$k-$i
  if [ -L "$1" ] || ! ln "$1" "$s"; then cat "$1" >"$s" || { rm -f "$s"; echo "@D permission_denied"; return; }; fi
  echo "@D staged $n ${s##*/}"
fi; }
while [ $# -ge 2 ]; do dn "$1" "$2"; shift 2; done
