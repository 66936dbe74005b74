#!/bin/bash
# Read-only checks of provision on a real GPU machine, and verbatim captures of what its nvidia-smi, /proc
# and /sys print (the tests/fixtures/real/ folders came from this). Sets nothing on any GPU: a guard put in
# front of nvidia-smi on PATH refuses every setter (-pm, -pl, -ac, -lgc, -r, ...) and logs each call.
#
#   scripts/real-gpu-check.sh [OUTDIR]     # default ./real-gpu-out; OUTDIR/real-gpu.tgz holds everything
#
# Runs as root on the GPU machine from the repository root, with the Python that has torch as python3.
# provision's own dependencies are taken from PYTHONPATH or the installed package; WHEELS=DIR installs
# wheels from DIR first (a machine with no network). RUNS: the seconds of the --active load (default 20).
set -u
export PYTHONUNBUFFERED=1
out=${1:-real-gpu-out}
work=$(mktemp -d)
mkdir -p "$out" "$work/raw" "$work/bin"
if [ -n "${WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$work/site" \
        "$WHEELS"/*.whl || exit 1
    export PYTHONPATH=$work/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
real=$(command -v nvidia-smi) || { echo "no nvidia-smi on PATH" >&2; exit 1; }
cat > "$work/bin/nvidia-smi" <<EOF
#!/bin/sh
echo "\$*" >> "$work/smi-calls.log"
for a in "\$@"; do
    case "\$a" in
        -pm|-pl|-ac|-rac|-lgc|-rgc|-lmc|-rmc|-lmcd|-rmcd|-r|-e|-c|-am|-caa|-mig|-cc|-dm|-tdm|-acp|-vm|-gtt|-mc|-cgi|-dgi|-cci|-dci|\\
        --persistence-mode*|--power-limit*|--applications-clocks*|--reset-*|--lock-*|--gpu-reset|--ecc-config*|\\
        --compute-mode*|--multi-instance-gpu*|--accounting-mode*)
            echo "real-gpu-check: refused nvidia-smi setter \$a (\$*)" | tee -a "$work/refused.log" >&2; exit 99;;
    esac
done
exec "$real" "\$@"
EOF
if command -v provision >/dev/null; then ln -s "$(command -v provision)" "$work/bin/provision"
else printf '#!/bin/sh\nexec python3 -m provision "$@"\n' > "$work/bin/provision"; fi
chmod +x "$work/bin/"*
export PATH=$work/bin:$PATH
nvidia-smi -pm 1 2>/dev/null; [ $? = 99 ] || { echo "the setter guard did not refuse -pm 1: stopping" >&2; exit 1; }
rm -f "$work/refused.log"

capture() {  # NAME COMMAND...: verbatim, framed as tests/realdata.py reads it
    local name=$1; shift
    { echo "\$ $*"; timeout 60 "$@"; echo "[exit $?]"; } > "$work/raw/$name.txt" 2>&1
}
field_list() { python3 -c "from provision.capabilities.$1; print(','.join($2))"; }
capture smi nvidia-smi
capture smi-q nvidia-smi -q
capture supported-clocks nvidia-smi -q -d SUPPORTED_CLOCKS
capture list nvidia-smi -L
capture version nvidia-smi --version
capture topo nvidia-smi topo -m
capture nvlink nvidia-smi nvlink -s
capture qgpu nvidia-smi --query-gpu="$(field_list "gpu import smi" "f.name for f in smi.QUERY_FIELDS")" \
    --format=csv,nounits
capture qsample nvidia-smi --query-gpu="$(field_list "active import sampler" "sampler.SAMPLE_FIELDS")" \
    --format=csv,nounits
capture qsc nvidia-smi --query-supported-clocks=gpu_uuid,memory,graphics --format=csv,noheader,nounits
capture remapped nvidia-smi --query-remapped-rows=gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure --format=csv
capture proc sh -c 'cat /proc/driver/nvidia/version; for f in /proc/driver/nvidia/gpus/*/information; do
    echo "== $f"; cat "$f"; done; ls -l /dev/nvidia*'
capture pci sh -c 'for d in /sys/bus/pci/devices/*; do [ "$(cat $d/vendor)" = 0x10de ] || continue; echo "== $d"
    for f in current_link_speed current_link_width max_link_speed max_link_width aer_dev_correctable aer_dev_fatal \
        aer_dev_nonfatal numa_node local_cpulist; do printf "%s: " $f; cat $d/$f 2>&1; done; done'
capture dmesg sh -c 'dmesg 2>&1 | grep -i -E "nvrm|xid|nvidia" | tail -50'
# The GPU's other modes (ECC, compute mode, MIG) and what a reset would need: read-only queries and listings.
capture q-modes nvidia-smi --query-gpu=index,ecc.mode.current,ecc.mode.pending,compute_mode,mig.mode.current,mig.mode.pending \
    --format=csv
capture q-reset nvidia-smi --query-gpu=index,reset_status.reset_required,reset_status.drain_and_reset_recommended \
    --format=csv
capture q-d-ecc nvidia-smi -q -d ECC
capture q-d-compute nvidia-smi -q -d COMPUTE
capture q-d-reset nvidia-smi -q -d RESET_STATUS
capture q-d-rows nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT
capture q-xml nvidia-smi -q -x
capture mig-help nvidia-smi mig -h
capture mig-lgip nvidia-smi mig -lgip
capture mig-lgipp nvidia-smi mig -lgipp
capture mig-lcip nvidia-smi mig -lcip
capture mig-lgi nvidia-smi mig -lgi
capture mig-lci nvidia-smi mig -lci
# What a recovery reads: the driver's recovery action, and the MIG device files Slurm's gres names.
capture q-recovery nvidia-smi --query-gpu=index,pci.bus_id,gpu_recovery_action --format=csv
capture mig-caps sh -c 'ls -l /proc/driver/nvidia-caps /dev/nvidia-caps; head -20 /proc/driver/nvidia-caps/mig-minors'
# What sits next to the driver on the node: packages, kernels and their modules, the stack's tools.
capture stack sh -c 'uname -r; cat /etc/os-release; dpkg-query -W -f="\${Package} \${Version} \${Status}\n" 2>&1 |
    grep -i -E "nvidia|dcgm|cuda|fabric|nscq|enroot|pyxis|linux-(image|modules)"; ls -l /boot; cat /boot/grub/grubenv;
    grep -E "^GRUB_DEFAULT" /etc/default/grub; dkms status; ls /lib/modules; lsmod | grep -E "^nvidia"; modinfo nvidia |
    head -12; modinfo nvidia-peermem | head -8; cat /etc/modules-load.d/*.conf; ls -l /etc/cdi /var/run/cdi;
    for t in dcgmi nv-hostengine nvidia-ctk nv-fabricmanager enroot nvidia-persistenced; do command -v $t; done;
    dcgmi --version; nvidia-ctk --version; nv-fabricmanager --version; ls /proc/driver/nvidia-nvswitch/devices'

# One host reached without SSH, intending what a one-box user would: persistence, the card's count, its cap.
cat > "$work/inventory.yaml" <<'EOF'
all:
  hosts:
    gpubox: {ansible_connection: local}
  vars:
    provision_gpu: {persistence: true, count: 1, power_limit: 700}
    provision_launcher: {nproc_per_node: gpu}
EOF
# The same box, also intending the GPU's modes as a real H200 has them (ECC on, compute mode default, MIG off),
# and intents asking for MIG layouts, which apply --check plans against the card's real profiles.
sed 's/power_limit: 700}/power_limit: 700, ecc: true, compute_mode: default, mig: disabled}/' \
    "$work/inventory.yaml" > "$work/modes.yaml"
sed 's/power_limit: 700}/power_limit: 700, mig: [3g.71gb, 3g.71gb]}/' "$work/inventory.yaml" > "$work/mig.yaml"
sed 's/power_limit: 700}/power_limit: 700, mig: [4g.71gb, 4g.71gb]}/' "$work/inventory.yaml" > "$work/mig-bad.yaml"
step() {  # NAME COMMAND...: its output to NAME.out; the wall time and exit status here
    local name=$1; shift
    echo "=== $name: $*"
    local start; start=$(date +%s%N)
    timeout "${STEP_TIMEOUT:-200}" "$@" > "$work/$name.out" 2>&1
    echo "rc=$? wall=$(( ($(date +%s%N) - start) / 1000000 )) ms"
    tail -c 4000 "$work/$name.out"
}
step facts-json provision facts --local --json
step facts provision facts --local
step verify provision verify "$work/inventory.yaml"
step verify-json provision verify "$work/inventory.yaml" --json
step check provision apply "$work/inventory.yaml" --check --diff
step local-check provision apply --local --check
step modes-verify provision verify "$work/modes.yaml" -v
step mig-check provision apply "$work/mig.yaml" --check --diff
step mig-bad-check provision apply "$work/mig-bad.yaml" --check
step mig-adhoc-check provision mig 3g.71gb,3g.71gb --check
step recover-check provision recover "$work/inventory.yaml" --check
step load sh -c 'python3 - --seconds 8 < provision/capabilities/active/load_program.py'
step active provision verify "$work/inventory.yaml" --active --duration "${RUNS:-20}"
echo "=== nvidia-smi calls: $(wc -l < "$work/smi-calls.log")"
sort "$work/smi-calls.log" | uniq -c | sort -rn
echo "=== setters refused: $(cat "$work/refused.log" 2>/dev/null || echo none)"
tar czf "$out/real-gpu.tgz" -C "$work" .
echo "everything: $out/real-gpu.tgz"
