# Arguments: path, confinement root. Run before reads that use deepagents' own scripts (read, glob)
# in virtual mode, to refuse symlinks leading out of the root.
. ./prelude.sh
if [ -L "$1" ]; then f=$(readlink -f "$1") || f=; [ -n "$f" ] || { echo "@C ok"; exit 0; }
else phys "$1" || { echo "@C invalid_path"; exit 0; }; f=$PH; fi
phys "$2" || { echo "@C invalid_path"; exit 0; }
if inside "$f" "$PH"; then echo "@C ok"; else echo "@C invalid_path"; fi
