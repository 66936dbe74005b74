#!/bin/sh
# provision-gpu-tuning: apply the GPU settings in /etc/provision/gpu-tuning.conf.
# Installed by provision and run at every boot by provision-gpu-tuning.service:
# persistence, compute mode, power limits, clocks and MIG instances are lost at
# each reboot and driver reload. (ECC mode is not: the driver keeps it; MIG mode
# only before Hopper.)
# Every GPU is tried, whatever fails on another; the exit status says if any failed.
# A GPU the file does not list (a replacement, a card moved in from another host)
# gets the line of its model (model=NAME, spaces as _), else the line model=*, so
# that no card this boot meets runs above the cap the inventory gives it.
# Locked clocks cannot be read back from nvidia-smi: what is set is recorded in
# /run/provision/gpu-clocks/<UUID>, where `provision facts/apply` read it.
set -u
set -f  # values are split on spaces below; never expand a glob
conf=${1:-/etc/provision/gpu-tuning.conf}
records=${PROVISION_CLOCK_RECORDS:-/run/provision/gpu-clocks}
failed=0

smi() {
    echo "nvidia-smi $*"
    nvidia-smi "$@" || { echo "provision-gpu-tuning: FAILED: nvidia-smi $*" >&2; failed=1; return 1; }
}

# tune UUID LINE: the settings of one line of the file, applied to the GPU with that UUID.
tune() {
    gpu=$1 persistence='' compute_mode='' power_limit='' clocks='' locked_sm='' locked_mem='' mem_deferred='' mig=''
    for word in $2; do
        case $word in
            persistence=*) persistence=${word#*=} ;;
            compute_mode=*) compute_mode=${word#*=} ;;
            power_limit=*) power_limit=${word#*=} ;;
            clocks=*) clocks=${word#*=} ;;
            locked_sm=*) locked_sm=${word#*=} ;;
            locked_mem=*) locked_mem=${word#*=} ;;
            mem_deferred=*) mem_deferred=${word#*=} ;;
            mig=*) mig=${word#*=} ;;
            '#'*) break ;;
        esac
    done
    case $persistence in on) smi -i "$gpu" -pm 1 ;; off) smi -i "$gpu" -pm 0 ;; esac
    case $compute_mode in
        default) smi -i "$gpu" -c DEFAULT ;;
        exclusive_process) smi -i "$gpu" -c EXCLUSIVE_PROCESS ;;
        prohibited) smi -i "$gpu" -c PROHIBITED ;;
    esac
    [ -z "$power_limit" ] || smi -i "$gpu" -pl "$power_limit"
    case $clocks in '') ;; default) smi -i "$gpu" -eow -rac ;; *) smi -i "$gpu" -eow -ac "$clocks" ;; esac
    [ -z "$mig" ] || mig_layout "$gpu" "$mig"
    record=$gpu ok=1
    for lock in "sm:$locked_sm:-lgc:-rgc" "mem:$locked_mem:-lmc:-rmc" "mem_deferred:$mem_deferred:-lmcd:-rmcd"; do
        IFS=: read -r key value set reset <<LOCK
$lock
LOCK
        case $value in
            '') continue ;;
            default) smi -i "$gpu" -eow "$reset" || ok=0 ;;
            *) smi -i "$gpu" -eow "$set" "$value" || ok=0 ;;
        esac
        record="$record $key=$value"
    done
    if [ "$record" != "$gpu" ] && [ $ok = 1 ]; then
        mkdir -p "$records" && printf '%s\n' "$record" > "$records/.$gpu.tmp" && mv -f "$records/.$gpu.tmp" "$records/$gpu"
    fi
}

# mig_layout UUID TUPLES: the GPU's MIG layout (capabilities/gpu/mig*.py), made whole or not at all (a half-made
# layout is destroyed and the failure logged); left alone where the GPU already has GPU instances (the unit run
# again by hand). Since Hopper the driver keeps no MIG mode across a reload (NVIDIA's MIG user guide: no InfoROM
# bit), so a line with a layout turns the mode on first where it reads Disabled; a GPU something holds keeps it
# pending, and its layout is logged as not made.
mig_layout() {
    case $(nvidia-smi mig -i "$1" -lgi 2>&1) in *"MIG "[0-9]*) echo "MIG layout of $1 present: left alone"; return 0 ;; esac
    case $(nvidia-smi -i "$1" --query-gpu=mig.mode.current --format=csv,noheader 2>&1) in
        *Disabled*) smi -i "$1" -mig 1 || return 0 ;;
    esac
    smi mig -i "$1" -cgi "$2" -C && return 0
    nvidia-smi mig -i "$1" -dci >/dev/null 2>&1; nvidia-smi mig -i "$1" -dgi >/dev/null 2>&1
    echo "provision-gpu-tuning: MIG layout $2 of $1 not made (destroyed what was made)" >&2
}

# model_line MODEL: the file's line for a GPU of that model (spaces as _), else its line for any model.
model_line() {
    found='' any=''
    while read -r line; do
        case $line in
            "model=$1"|"model=$1 "*) found=$line; break ;;
            "model=*"|"model=* "*) any=$line ;;
        esac
    done < "$conf"
    printf '%s\n' "${found:-$any}"
}

[ -r "$conf" ] || { echo "provision-gpu-tuning: no $conf: nothing to apply"; exit 0; }
listed=' '
while read -r line; do
    case $line in gpu=GPU-*) ;; *) continue ;; esac
    uuid=${line%%[ 	]*}
    uuid=${uuid#gpu=}
    listed="$listed$uuid "
    tune "$uuid" "$line"
done < "$conf"

# The GPUs this boot shows, one "UUID, NAME" a line; one lost or unreadable still leaves the others listed.
echo "nvidia-smi --query-gpu=uuid,name --format=csv,noheader"
gpus=$(nvidia-smi --query-gpu=uuid,name --format=csv,noheader 2>&1) || {
    echo "provision-gpu-tuning: FAILED: nvidia-smi --query-gpu=uuid,name --format=csv,noheader: $gpus" >&2
    failed=1
}
while IFS=, read -r uuid name; do
    case $uuid in GPU-*) ;; *) continue ;; esac
    case $listed in *" $uuid "*) continue ;; esac
    name=${name# }
    line=$(model_line "$(printf '%s' "$name" | tr ' ' '_')")
    echo "provision-gpu-tuning: $uuid ($name) is not in $conf: ${line:-no line for its model or any model}"
    [ -z "$line" ] || tune "$uuid" "$line"
done <<GPUS
$gpus
GPUS
exit $failed
