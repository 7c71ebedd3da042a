# Shared helpers of the file scripts (builtins only, so they cost no process):
#   why P      classify a missing path by its deepest existing ancestor
#   phys P     set PH to P with symlinks resolved (P may not exist yet)
#   inside P R succeed when P is R or below it
exec 2>/dev/null
why() { w=$1; while :; do w=${w%/*}; [ -n "$w" ] || { echo file_not_found; return; }
if [ -e "$w" ]; then
if [ ! -d "$w" ]; then echo invalid_path; elif [ -x "$w" ]; then echo file_not_found; else echo permission_denied; fi
return; fi; done; }
# shellcheck disable=SC2034  # PH is what phys returns, read by the scripts that include this one
phys() { q=$1; r=; while [ ! -d "$q" ]; do r=/${q##*/}$r; q=${q%/*}; [ -n "$q" ] || q=/; done
cd -P "$q" || return 1; q=$PWD; [ "$q" = / ] && q=; PH=$q$r; }
inside() { case "$1/" in "$2"/*) return 0;; esac; return 1; }
