#!/usr/bin/env bash
# Wall time and peak RSS of `bundle` and `unbundle` (-type=bc unless --type) on two
# images, for up to two builds of offload-inspect (before, after) and clang-offload-bundler-22, run
# interleaved in one go (docs/BENCHMARKS.md, section 1f). GNU time gives both numbers
# (%e, %M: the peak RSS wait4 reports).
#
#   offload-formats/bench/bundle-vs-clang.sh [--mib N] [--rounds N] [--sparse] [--type T]
#       [--compress] [--from FILE] [--before PATH] [--after PATH] [--dir DIR] [--raw FILE]
#
# --raw appends every run to FILE as "MIB TYPE TOOL MODE WALL_S PEAK_KIB" lines, the
# input of plot-bundle-bench.py.
# --compress bundles with -compress (every tool), and unbundles clang's compressed bundle.
# --from FILE: the inputs are FILE's bytes repeated to the size (the device image from
# FILE's middle on), compressible like real code, instead of random bytes. Past 128 MiB
# such data streams to other compressed bytes than clang's (offload-formats/README.md):
# export OFFLOAD_INSPECT_EXACT_COMPRESSION=1 to compare the exact mode instead.
# Inputs are random (dense) unless --sparse or --from; they, the bundles and the unbundled images
# live in DIR (default: a fresh folder under $CARGO_TARGET_DIR or target/), about 6x the
# input size on disk while it runs, removed at the end.
set -euo pipefail

mib=512 rounds=5 sparse=0 before="" after="" dir="" ty=bc raw="" compress=() zip="" from="" data=""
while [ $# -gt 0 ]; do
    case "$1" in
        --mib) mib=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --sparse) sparse=1; shift ;;
        --compress) compress=(-compress); zip=+compress; shift ;;
        --from) from=$2; data=+code; shift 2 ;;
        --type) ty=$2; shift 2 ;;
        --before) before=$2; shift 2 ;;
        --after) after=$2; shift 2 ;;
        --dir) dir=$2; shift 2 ;;
        --raw) raw=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
root=$(cd "$(dirname "$0")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
after=${after:-$target/release/offload-inspect}
clang_bundler=$(command -v clang-offload-bundler-22 || echo /usr/lib/llvm-22/bin/clang-offload-bundler)
dir=${dir:-$target/bench-bundle.$$}
for tool in "$after" "$clang_bundler" /usr/bin/time ${before:+"$before"}; do
    [ -x "$tool" ] || { echo "missing: $tool (build with cargo build --release -p offload-formats)" >&2; exit 1; }
done
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT

for i in host dev; do
    if [ "$sparse" = 1 ]; then
        truncate -s "${mib}M" "$dir/$i"
    elif [ -n "$from" ]; then
        skip=1; [ $i = dev ] && skip=$(( $(stat -c %s "$from") / 2 ))
        { tail -c +"$skip" "$from"; while cat "$from"; do :; done; } 2>/dev/null \
            | head -c "$((mib << 20))" > "$dir/$i" || true
        [ "$(stat -c %s "$dir/$i")" = "$((mib << 20))" ] || { echo "could not make $i from $from" >&2; exit 1; }
    else
        head -c "$((mib << 20))" /dev/urandom > "$dir/$i"
    fi
done
targets=host-x86_64-unknown-linux-gnu,openmp-nvptx64-nvidia-cuda--sm_90
# The bundle every tool unbundles: clang's.
"$clang_bundler" -type=$ty -targets=$targets -input="$dir/host" -input="$dir/dev" -output="$dir/ref.bc" ${compress[@]+"${compress[@]}"}

tools=(clang)
[ -n "$before" ] && tools+=(before)
tools+=(after)
run() { # tool mode
    local tool=$1 mode=$2 exe args
    case $tool in
        clang) exe=$clang_bundler; [ "$mode" = unbundle ] && args=(-unbundle) || args=() ;;
        before) exe=$before; args=("$mode") ;;
        after) exe=$after; args=("$mode") ;;
    esac
    rm -f "$dir/out.bc" "$dir/out.host" "$dir/out.dev"
    if [ "$mode" = bundle ]; then
        args+=(-type=$ty -targets=$targets -input="$dir/host" -input="$dir/dev" -output="$dir/out.bc" ${compress[@]+"${compress[@]}"})
    else
        args+=(-type=$ty -targets=$targets -input="$dir/ref.bc" -output="$dir/out.host" -output="$dir/out.dev")
    fi
    /usr/bin/time -f "%e %M" -o "$dir/time" "$exe" "${args[@]}"
    # Every run's output is checked: the bundle against clang's, the images against the inputs.
    if [ "$mode" = bundle ]; then
        cmp -s "$dir/out.bc" "$dir/ref.bc" || { echo "$tool bundle: output differs" >&2; exit 1; }
    else
        cmp -s "$dir/out.host" "$dir/host" && cmp -s "$dir/out.dev" "$dir/dev" \
            || { echo "$tool unbundle: output differs" >&2; exit 1; }
    fi
    echo "$tool $mode $(cat "$dir/time")" >> "$dir/results"
}

echo "-type=$ty${zip}; $(nproc) CPUs, $(uname -m); load before: $(cut -d' ' -f1-3 /proc/loadavg); inputs 2 x $mib MiB ($([ $sparse = 1 ] && echo sparse || { [ -n "$from" ] && echo "from $from"; } || echo random)); $rounds rounds"
for r in $(seq "$rounds"); do
    # Rotate the order so no tool always runs first (cold cache, writeback of the last).
    n=${#tools[@]}
    for k in $(seq 0 $((n - 1))); do
        tool=${tools[$(((k + r) % n))]}
        run "$tool" bundle
        run "$tool" unbundle
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$raw" ]; then
    awk -v mib=$((2 * mib)) -v ty=$ty$zip$data '{print mib, ty, $0}' "$dir/results" >> "$raw"
fi

# Median per tool and mode; ratios against clang's medians.
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
printf '| mode | tool | wall s (median) | wall s (min..max) | peak RSS MiB (median) | wall / clang | peak / clang |\n|---|---|---:|---:|---:|---:|---:|\n'
for mode in bundle unbundle; do
    cw=$(awk -v m=$mode '$1=="clang" && $2==m {print $3}' "$dir/results" | median)
    cm=$(awk -v m=$mode '$1=="clang" && $2==m {print $4}' "$dir/results" | median)
    for tool in "${tools[@]}"; do
        w=$(awk -v t=$tool -v m=$mode '$1==t && $2==m {print $3}' "$dir/results" | median)
        lo=$(awk -v t=$tool -v m=$mode '$1==t && $2==m {print $3}' "$dir/results" | sort -n | head -1)
        hi=$(awk -v t=$tool -v m=$mode '$1==t && $2==m {print $3}' "$dir/results" | sort -n | tail -1)
        p=$(awk -v t=$tool -v m=$mode '$1==t && $2==m {print $4}' "$dir/results" | median)
        awk -v mode=$mode -v tool=$tool -v w=$w -v lo=$lo -v hi=$hi -v p=$p -v cw=$cw -v cm=$cm \
            'BEGIN {printf "| %s | %s | %.2f | %.2f..%.2f | %.1f | %.2f | %.3f |\n", mode, tool, w, lo, hi, p/1024, w/cw, p/cm}'
    done
done
