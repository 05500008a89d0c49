#!/usr/bin/env bash
# arm64-vm.sh: an arm64 Debian bookworm virtual machine under qemu-system-aarch64
# (software emulation, TCG) for testing gotpstub on arm64.
#
# Usage: scripts/arm64-vm.sh COMMAND [ARGS...]
#
#   build         build the VM image (if the cached one is missing or stale)
#   boot          build if needed, then start the VM in the background
#   stop          stop the VM (its disk is a throw-away snapshot: nothing is lost
#                 but files written outside the shared directories)
#   status        what is built, what runs
#   run CMD...    run CMD in the VM, in the checkout's root directory (the host
#                 checkout, shared live and read-write at the same path); exit
#                 status, stdout and stderr are CMD's.  Boots the VM if needed.
#   e2e           cross-compile the Go test packages listed in E2E_PACKAGES
#                 (a variable near the top of this script) for arm64 on the host and run them in the VM;
#                 exit status 0 iff all pass.  Last line: "e2e: N passed, M failed".
#                 Each run has its own bin/arm64-e2e/run-DATE-XXXX/ (logs NAME.log;
#                 bin/arm64-e2e/latest is the last one).  scripts/test.sh (so CI,
#                 .ci/run) runs it last, with ARM64_VM_KEEP=0 (ARM64_VM=0 skips it).
#   suite TEST... run GDB testsuite files (gdb.base/break.exp, gdb.trace, ...) in
#                 the VM with /work/shared/gdbsuite/run-suite.sh, against the
#                 VM's gdbserver and against bin/gotpstub-arm64 (built here with
#                 GOARCH=arm64); last line "lost N PASS": PASSes gdbserver gets
#                 that gotpstub does not.  Exit status 0 iff N is 0.
#
# The VM is left running after run/e2e/suite/boot so the next command need not
# boot it again (ARM64_VM_KEEP=0: stop it again if this command booted it and
# no other command uses it now).  Each cache directory has its own VM, lock
# and random ssh port: VMs of two cache directories run side by side.  A VM
# left by an interrupted boot, or one that no longer answers ssh, is stopped
# and booted anew by the next command.
# Messages of this script go to stderr, prefixed "arm64-vm:"; `run` prints
# none unless it has to build or boot (ARM64_VM_QUIET=1: not even then).
#
# Environment (defaults in brackets):
#   ARM64_VM_CACHE     image cache and VM state [$HOME/.cache/gotpstub-arm64-vm]
#   ARM64_VM_SHARED    shared directory (holds gdbsuite/run-suite.sh), mounted
#                      read-only at the same path in the VM [CHECKOUT/../shared]
#   ARM64_VM_MIRROR    Debian mirror [the host's apt source for bookworm]
#   ARM64_VM_SECURITY_MIRROR  [the host's apt source for bookworm-security]
#   ARM64_VM_CPU [max,pauth-impdef=on]  ARM64_VM_SMP [2]  ARM64_VM_MEM [4096] (MiB)
#   ARM64_VM_BOOT_TIMEOUT   seconds to wait for a booted VM's ssh [300]
#   ARM64_VM_BUILD_TIMEOUT  seconds for the image's first (install) boot [5400]
#   ARM64_VM_RUN_TIMEOUT    seconds for one `run` command, 0 = none [0]
#   ARM64_VM_E2E_FLAGS      flags for the test binaries [-test.v -test.short -test.timeout=30m]
#   ARM64_VM_SUITE_OUT      results of `suite` on the host [/tmp/gotpstub-arm64-suite]
#   ARM64_VM_SUITE_FLAGS    extra run-suite.sh options [--timeout 1200]
#   ARM64_VM_SUITE_STUB     test this stub (a path in the VM) instead of building
#                           bin/gotpstub-arm64 [none]
#   ARM64_VM_KEEP [1]  ARM64_VM_QUIET [0]
#
# Exit status of the script itself when it cannot do its job: 125 (VM cannot
# be built, booted or reached), 124 (ARM64_VM_RUN_TIMEOUT expired), 2 (usage).
# Measured here (2 cores, 2026-11-28, another arm64 VM running beside it):
#   ARM64_VM_CACHE=<empty dir> scripts/arm64-vm.sh build     19 min 20 s
#     (12 min 50 s on a quiet machine); boot 7-15 s;
#   ARM64_VM_KEEP=0 scripts/arm64-vm.sh e2e (image cached)   2 min 55 s
#     (boot 13.5 s; tests: inferior ~2 min, the others 7-15 s each);
#     5 min 12 s with ./trapfallback/arm64/ and ./e2e/ added (e2e 4 min
#     12 s; 06:00 UTC, no other VM);
#   both at once from an empty cache (scripts/test.sh's step) 22 min.
# Design, cache layout, host requirements and more measured times:
# scripts/arm64-vm/README.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HELPERS=$ROOT/scripts/arm64-vm

# ---------------------------------------------------------------- recipe
# Bump IMAGE_VERSION for a recipe change that the hash below does not see
# (the hash covers this block's lists and the guest files in scripts/arm64-vm/).
IMAGE_VERSION=1
SUITE=bookworm
# (debootstrap does not resolve virtual packages: libboost-regex1.74.0 is named
# for gdb's libsource-highlight4v5, which needs libboost-regex1.74.0-icu72.)
GUEST_PACKAGES="linux-image-arm64 busybox-static kmod openssh-server iproute2 procps strace
  gdb gdbserver gcc g++ make dejagnu expect libc6-dev xz-utils systemtap-sdt-dev dpkg-dev
  libboost-regex1.74.0"
# Modules (of Debian's arm64 kernel) loaded by the initramfs, in this order
# after their dependencies: disk, root file system, 9p shares, network, entropy.
INITRAMFS_MODULES="virtio_pci virtio_blk crc32c_generic ext4 9pnet_virtio 9p virtio_net virtio-rng"
DISK_SIZE=8G
GUEST_FILES="initramfs-init guest-init guest-build guest-inittab guest-sshd.conf"

# The Go test packages `e2e` cross-compiles and runs in the VM, one test binary
# each, run in its package directory (the environment's E2E_PACKAGES, e.g.
# "./jit/ ./inferior/", overrides the default): the arm64 JIT, instruction
# relocation, process control, register layouts, TLS, and the e2e tests
# that apply on arm64 (gdb against the arm64 stub: debugging and trap
# tracepoints; e2e/isa_arm64_test.go lists them, the others skip).  Every
# package runs with GOTPSTUB_STUB set to an arm64 build of the stub.  They run with
# ARM64_VM_E2E_FLAGS, default -test.short: see "e2e" in scripts/arm64-vm/README.md.
E2E_PACKAGES="${E2E_PACKAGES:-./jit/ ./fasttp/a64/ ./inferior/ ./tdesc/ ./threaddb/ ./trapfallback/arm64/ ./e2e/}"

# ---------------------------------------------------------------- settings
CACHE=${ARM64_VM_CACHE:-${HOME:-/root}/.cache/gotpstub-arm64-vm}
SHARED=${ARM64_VM_SHARED:-$(dirname "$ROOT")/shared}
CPU=${ARM64_VM_CPU:-max,pauth-impdef=on}
SMP=${ARM64_VM_SMP:-2}
MEM=${ARM64_VM_MEM:-4096}
BOOT_TIMEOUT=${ARM64_VM_BOOT_TIMEOUT:-300}
BUILD_TIMEOUT=${ARM64_VM_BUILD_TIMEOUT:-5400}
RUN_TIMEOUT=${ARM64_VM_RUN_TIMEOUT:-0}
KEEP=${ARM64_VM_KEEP:-1}
QUIET=${ARM64_VM_QUIET:-0}
VMDIR=$CACHE/vm                     # state of the running VM
HOSTALIAS=gotpstub-arm64-vm         # ssh Host and HostKeyAlias
export PATH=$PATH:/usr/local/go/bin

log() { [ "$QUIET" = 1 ] || echo "arm64-vm: $*" >&2; }
say() { echo "arm64-vm: $*" >&2; }
die() { echo "arm64-vm: error: $*" >&2; exit 125; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//p}' "$0"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

case "$ROOT$SHARED" in *[[:space:]:,]*) die "paths with spaces, ':' or ',' are not supported: $ROOT, $SHARED" ;; esac

# The image key: a changed recipe is a new image directory.
image_key() {
    local f
    {
        echo "$IMAGE_VERSION $SUITE $GUEST_PACKAGES $INITRAMFS_MODULES $DISK_SIZE"
        for f in $GUEST_FILES; do cat "$HELPERS/$f"; done
    } | sha256sum | cut -c1-12
}
KEY=$(image_key)
IMG=$CACHE/image-$IMAGE_VERSION-$KEY

mkdir -p "$CACHE"
# One build or boot at a time (fd 8 is held until the script exits or unlocks;
# the long-lived processes it starts, qemu and the ssh master, must not inherit it).
lock() { exec 8>"$CACHE/.lock"; flock 8; }
unlock() { flock -u 8; }
# Every command that uses the VM holds a shared lock on .users (fd 9) until it
# exits, so that one that booted it with ARM64_VM_KEEP=0 stops it only if no
# other command (another shell, another engineer) still uses it.
USING=0
use_vm() { [ "$USING" = 1 ] && return 0; exec 9>>"$CACHE/.users"; flock -s 9; USING=1; }

# ---------------------------------------------------------------- host tools
# Debian packages this script needs on the host, by the command they give.
declare -A HOST_PKG=([debootstrap]=debootstrap [qemu-system-aarch64]=qemu-system-arm
    [mke2fs]=e2fsprogs [cpio]=cpio [ssh]=openssh-client [ssh-keygen]=openssh-client
    [dpkg-deb]=dpkg [flock]=util-linux [gzip]=gzip [sha256sum]=coreutils)
need_tools() {
    local t missing=() pkgs=()
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 && continue
        missing+=("$t"); pkgs+=("${HOST_PKG[$t]:-$t}")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        log "installing host packages ${pkgs[*]} (for ${missing[*]})"
        { apt-get update -qq &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
        } >"$CACHE/host-apt.log" 2>&1 || die "apt-get install ${pkgs[*]} failed, see $CACHE/host-apt.log"
    else
        die "missing on the host: ${missing[*]}; install the Debian packages ${pkgs[*]}"
    fi
}

# The first URI of the host's apt sources (deb822 .sources or one-line .list)
# that serves Debian suite $1 as binary packages.
host_mirror() {
    local want=$1 f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        awk -v want="$want" 'BEGIN { RS = "" }
            { types = uris = suites = ""; n = split($0, l, "\n")
              for (i = 1; i <= n; i++) {
                  if (l[i] ~ /^Types:/) types = l[i]
                  else if (l[i] ~ /^URIs:/) uris = l[i]
                  else if (l[i] ~ /^Suites:/) suites = l[i] }
              sub(/^Suites:/, "", suites)
              if (types ~ /[ \t]deb([ \t]|$)/ && index(" " suites " ", " " want " ")) {
                  sub(/^URIs:[ \t]*/, "", uris); split(uris, u, /[ \t]+/); print u[1]; exit } }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        awk -v want="$want" '$1 == "deb" { i = 2
              if ($2 ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
              if ($(i + 1) == want) { print $i; exit } }' "$f"
    done
}
mirror() {
    local m=${ARM64_VM_MIRROR:-}
    [ -n "$m" ] || m=$(host_mirror "$SUITE" | head -n1)
    echo "${m:-http://deb.debian.org/debian}"
}
security_mirror() {
    local m=${ARM64_VM_SECURITY_MIRROR:-}
    [ -n "$m" ] || m=$(host_mirror "$SUITE-security" | head -n1)
    echo "${m:-http://deb.debian.org/debian-security}"
}

# ---------------------------------------------------------------- image
# Modules $INITRAMFS_MODULES and their dependencies ("depends=" in each .ko's
# .modinfo), dependencies first, as paths relative to $1 (lib/modules/VER).
module_order() {
    local moddir=$1 m
    declare -A seen=()
    local order=()
    add_module() {
        local name=$1 file deps d
        name=${name//-/_}
        [ -z "${seen[$name]:-}" ] || return 0
        seen[$name]=1
        file=$(find "$moddir" -name "$name.ko" -o -name "${name//_/-}.ko" | head -n1)
        [ -n "$file" ] || die "kernel module $name not found in $moddir"
        deps=$(tr '\0' '\n' <"$file" | sed -n 's/^depends=//p' | head -n1)
        for d in ${deps//,/ }; do add_module "$d"; done
        order+=("${file#"$moddir"/}")
    }
    for m in $INITRAMFS_MODULES; do add_module "$m"; done
    printf '%s\n' "${order[@]}"
}

# Build the image into $IMG unless it is there.  Caller holds the lock.
build_image() {
    [ -f "$IMG/complete" ] && return 0
    need_tools debootstrap qemu-system-aarch64 mke2fs cpio ssh-keygen dpkg-deb gzip
    local work=$CACHE/build.tmp t0 t1 mirror sec kdeb kver bdeb m rc qpid
    mirror=$(mirror) sec=$(security_mirror)
    rm -rf "$work"
    mkdir -p "$work/out"
    t0=$(now)
    log "building image $(basename "$IMG") from $mirror (log: $work/build.log)"

    # 1. First stage on the host: download every package, unpack the essential ones.
    log "debootstrap --foreign (arm64, $SUITE): downloading packages"
    debootstrap --foreign --arch=arm64 --variant=minbase \
        --include="$(tr -s ' \n' ',' <<<"$GUEST_PACKAGES" | sed 's/^,//; s/,$//')" \
        "$SUITE" "$work/root" "$mirror" >"$work/build.log" 2>&1 ||
        die "debootstrap --foreign failed, see $work/build.log"
    t1=$(now)

    # 2. Kernel, and a small initramfs: static busybox + the modules to mount
    #    the root file system and the shares.
    kdeb=$(ls "$work"/root/var/cache/apt/archives/linux-image-[0-9]*_arm64.deb)
    [ "$(echo "$kdeb" | wc -l)" = 1 ] || die "expected one linux-image deb, got: $kdeb"
    dpkg-deb -x "$kdeb" "$work/kernel"
    kver=$(ls "$work/kernel/lib/modules")
    cp "$work/kernel/boot/vmlinuz-$kver" "$work/out/vmlinuz"
    bdeb=$(ls "$work"/root/var/cache/apt/archives/busybox-static_*_arm64.deb)
    dpkg-deb -x "$bdeb" "$work/busybox"
    mkdir -p "$work/initramfs/bin" "$work/initramfs/modules"
    cp "$work/busybox/bin/busybox" "$work/initramfs/bin/busybox"
    install -m 755 "$HELPERS/initramfs-init" "$work/initramfs/init"
    module_order "$work/kernel/lib/modules/$kver" >"$work/modules.txt"
    while read -r m; do
        cp "$work/kernel/lib/modules/$kver/$m" "$work/initramfs/modules/"
        basename "$m"
    done <"$work/modules.txt" >"$work/initramfs/modules/order"
    (cd "$work/initramfs" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip -6) \
        >"$work/out/initrd.img"
    echo "$kver" >"$work/out/kernel-version"

    # 3. What the first boot needs in the root file system.
    local r=$work/root
    install -D -m 755 "$HELPERS/guest-build" "$r/usr/local/sbin/arm64-vm-build"
    install -D -m 755 "$HELPERS/guest-init" "$r/usr/local/sbin/arm64-vm-init"
    install -D -m 644 "$HELPERS/guest-inittab" "$r/etc/arm64-vm/inittab"
    install -D -m 644 "$HELPERS/guest-sshd.conf" "$r/etc/arm64-vm/sshd.conf"
    {
        echo "deb $mirror $SUITE main"
        echo "deb $mirror $SUITE-updates main"
        echo "deb $sec $SUITE-security main"
        echo "deb-src $mirror $SUITE main"
        echo "deb-src $mirror $SUITE-updates main"
        echo "deb-src $sec $SUITE-security main"
    } >"$r/etc/apt/sources.list"
    printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"
    chmod 755 "$r/usr/sbin/policy-rc.d"
    mkdir -p "$r/etc/dpkg/dpkg.cfg.d"
    echo force-unsafe-io >"$r/etc/dpkg/dpkg.cfg.d/arm64-vm-unsafe-io"
    mkdir -p "$r/etc/ssh" "$r/root/.ssh"
    ssh-keygen -q -t ed25519 -N '' -C "$HOSTALIAS host" -f "$r/etc/ssh/ssh_host_ed25519_key"
    ssh-keygen -q -t ed25519 -N '' -C "$HOSTALIAS client" -f "$work/out/id_ed25519"
    echo "$HOSTALIAS $(cut -d' ' -f1,2 "$r/etc/ssh/ssh_host_ed25519_key.pub")" >"$work/out/known_hosts"
    install -m 600 "$work/out/id_ed25519.pub" "$r/root/.ssh/authorized_keys"
    chmod 700 "$r/root/.ssh"

    # 4. The disk image, made from the directory (no loop mount, no root needed
    #    beyond owning the files).
    mke2fs -q -t ext4 -L arm64-vm -d "$r" "$work/out/disk.img" "$DISK_SIZE" >>"$work/build.log" 2>&1 ||
        die "mke2fs failed, see $work/build.log"
    rm -rf "$work/root" "$work/kernel" "$work/busybox" "$work/initramfs"

    # 5. First boot: the second stage and the rest of the recipe run in the VM
    #    (guest-build), which powers off at the end.
    log "first boot: debootstrap --second-stage in the VM (TCG; takes a while; console: $work/console.log)"
    : >"$work/console.log"
    qemu_cmd "$work/out" build "file:$work/console.log" "cache=unsafe"
    timeout -k 10 "$BUILD_TIMEOUT" "${QEMU[@]}" </dev/null >>"$work/build.log" 2>&1 8>&- 9>&- &
    qpid=$!
    # Show the recipe's progress lines while it runs.
    if [ "$QUIET" != 1 ]; then
        tail -n +1 -F --pid="$qpid" "$work/console.log" 2>/dev/null 8>&- 9>&- |
            sed -un 's/^arm64-vm-build: /arm64-vm:   /p' >&2 8>&- 9>&- &
    fi
    rc=0; wait "$qpid" || rc=$?
    wait 2>/dev/null || true
    cp "$work/console.log" "$work/out/build-console.log"
    if grep -q '^ARM64-VM-BUILD-FAILED' "$work/console.log" ||
        ! grep -q '^ARM64-VM-BUILD-OK' "$work/console.log"; then
        [ "$rc" = 124 ] && say "the first boot took longer than ARM64_VM_BUILD_TIMEOUT=${BUILD_TIMEOUT}s"
        say "last console lines ($work/console.log):"
        tail -n 25 "$work/console.log" | sed 's/^/  | /' >&2
        die "image build failed (qemu exit status $rc)"
    fi
    {
        echo "key: $(basename "$IMG")"
        echo "built: $(date -u +%FT%TZ) on $(hostname)"
        echo "mirror: $mirror  security: $sec"
        echo "kernel: $kver"
        echo "debootstrap first stage (host): $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }') s"
        echo "total build: $(since "$t0") s"
        grep '^arm64-vm-build: ' "$work/console.log" | sed 's/^arm64-vm-build: //'
    } >"$work/out/info.txt"
    cp "$work/build.log" "$work/out/build.log"
    rm -rf "$IMG"
    mv "$work/out" "$IMG"
    touch "$IMG/complete"
    rm -rf "$work"
    log "image built in $(since "$t0") s: $IMG"
    # Older images (other keys) are of no use any more.
    for m in "$CACHE"/image-*; do
        [ "$m" = "$IMG" ] || [ ! -d "$m" ] || { log "removing the old image $m"; rm -rf "$m"; }
    done
}

# QEMU=(the qemu command line) for image directory $1, mode $2 (build|run),
# serial $3 (a qemu chardev), drive cache option $4; extra words after that.
qemu_cmd() {
    local dir=$1 mode=$2 serial=$3 cache=$4 append
    shift 4
    append="console=ttyAMA0 root=/dev/vda rw panic=1 arm64vm.mode=$mode"
    QEMU=(qemu-system-aarch64 -M virt -cpu "$CPU" -smp "$SMP" -m "$MEM"
        -kernel "$dir/vmlinuz" -initrd "$dir/initrd.img"
        -device virtio-rng-pci -display none -monitor none -serial "$serial" -no-reboot)
    # shellcheck disable=SC2054 # commas inside qemu option values
    if [ "$mode" = build ]; then
        QEMU+=(-drive "file=$dir/disk.img,format=raw,if=virtio,$cache"
            -netdev user,id=net0 -device virtio-net-pci,netdev=net0,romfile=)
    else
        append="$append quiet arm64vm.share=checkout:$ROOT"
        QEMU+=(-drive "file=$dir/disk.img,format=raw,if=virtio,snapshot=on,$cache"
            -virtfs "local,path=$ROOT,mount_tag=checkout,security_model=none,id=checkout")
        if [ -d "$SHARED" ]; then
            append="$append arm64vm.share=shared:$SHARED"
            QEMU+=(-virtfs "local,path=$SHARED,mount_tag=shared,security_model=none,readonly=on,id=shared")
        fi
    fi
    QEMU+=(-append "$append" "$@")
}

# ---------------------------------------------------------------- VM
vm_pid() {
    local pid
    pid=$(cat "$VMDIR/qemu.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = qemu-system-aar ] &&
        echo "$pid"
}
vm_ssh() { ssh -F "$VMDIR/ssh_config" "$HOSTALIAS" "$@"; }

write_ssh_config() {
    cat >"$VMDIR/ssh_config" <<EOF
Host $HOSTALIAS
  HostName 127.0.0.1
  Port $1
  User root
  IdentityFile $IMG/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $IMG/known_hosts
  HostKeyAlias $HOSTALIAS
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 20
  ServerAliveInterval 15
  ServerAliveCountMax 8
  LogLevel ERROR
  ControlMaster no
  ControlPath $VMDIR/ssh-master
EOF
}

# One ssh connection kept open for the VM's life: each command is a new
# session on it, which saves the key exchange (~0.8 s under TCG).  Commands
# fall back to their own connection if it is gone.
start_ssh_master() {
    [ ${#VMDIR} -lt 90 ] || return 0      # a unix socket path has ~100 bytes
    vm_ssh -o ControlMaster=yes -o ControlPersist=no -fN </dev/null >/dev/null 2>&1 8>&- 9>&- ||
        log "warning: no ssh master connection (each command will connect by itself)"
}
stop_ssh_master() {
    [ -S "$VMDIR/ssh-master" ] || return 0
    vm_ssh -O exit </dev/null >/dev/null 2>&1 || true
}

BOOTED_HERE=0
# Make sure the VM runs (building the image first if needed).
ensure_vm() {
    local pid
    use_vm
    if pid=$(vm_pid) && [ -S "$VMDIR/ssh-master" ]; then check_vm "$pid"; return 0; fi
    lock
    if pid=$(vm_pid); then
        if [ ! -f "$VMDIR/checkout" ] || [ ! -f "$VMDIR/ssh_config" ]; then
            # Boots hold the lock until these files are written, and we hold
            # it: the command that booted this VM died while booting it.
            say "a VM whose boot was interrupted runs (pid $pid): stopping it"
            stop_vm
        else
            check_vm "$pid"
            # The master connection is gone (the VM did not answer for a
            # while? an earlier command was killed while booting?)
            if ! vm_ssh -O check </dev/null >/dev/null 2>&1; then
                if vm_answers; then
                    start_ssh_master
                else
                    say "the running VM (pid $pid) does not answer ssh: stopping it to boot a new one"
                    stop_vm
                fi
            fi
        fi
    fi
    if ! vm_pid >/dev/null; then
        build_image
        boot_vm
    fi
    unlock
}
# Does the VM answer ssh (three tries, ~1.5 min at most)?
vm_answers() {
    local _
    for _ in 1 2 3; do
        timeout -k 5 30 ssh -F "$VMDIR/ssh_config" -o ControlPath=none -o ConnectTimeout=20 "$HOSTALIAS" true \
            </dev/null >/dev/null 2>&1 8>&- 9>&- && return 0
        sleep 1
    done
    return 1
}
check_vm() {
    [ "$(cat "$VMDIR/checkout")" = "$ROOT" ] ||
        die "the VM (pid $1) runs for the checkout $(cat "$VMDIR/checkout"), not $ROOT; stop it first: $0 stop"
    [ "$(cat "$VMDIR/image")" = "$IMG" ] ||
        log "warning: the VM runs an older image ($(cat "$VMDIR/image")); '$0 stop' to boot the new one"
    return 0
}

# Start the VM from $IMG and wait for its ssh.  Caller holds the lock.
boot_vm() {
    need_tools qemu-system-aarch64 ssh
    local t0 port tries=0 pid
    rm -rf "$VMDIR"
    mkdir -p "$VMDIR"
    chmod 600 "$IMG/id_ed25519"
    t0=$(now)
    # A free port for ssh: qemu fails to start if the forward cannot bind.
    while :; do
        port=$(( 20000 + RANDOM % 40000 ))
        qemu_cmd "$IMG" run "file:$VMDIR/console.log" "cache=unsafe" \
            -netdev "user,id=net0,hostfwd=tcp:127.0.0.1:$port-:22" \
            -device virtio-net-pci,netdev=net0,romfile= \
            -daemonize -pidfile "$VMDIR/qemu.pid"
        "${QEMU[@]}" </dev/null >"$VMDIR/qemu.log" 2>&1 8>&- 9>&- && break
        tries=$((tries + 1))
        if [ $tries -ge 5 ] || ! grep -qi 'forward' "$VMDIR/qemu.log"; then
            die "qemu did not start: $(cat "$VMDIR/qemu.log")"
        fi
    done
    echo "$port" >"$VMDIR/port"
    echo "$ROOT" >"$VMDIR/checkout"
    echo "$IMG" >"$VMDIR/image"
    write_ssh_config "$port"
    BOOTED_HERE=1
    pid=$(vm_pid) || die "qemu exited at once: $(cat "$VMDIR/qemu.log")"
    log "booting the VM (pid $pid, ssh port $port)"
    while ! vm_ssh -o ConnectTimeout=5 true </dev/null >/dev/null 2>&1; do
        if ! vm_pid >/dev/null; then
            tail -n 25 "$VMDIR/console.log" | sed 's/^/  | /' >&2
            die "the VM stopped while booting (console: $VMDIR/console.log)"
        fi
        if grep -q 'ARM64-VM-BOOT-FAILED' "$VMDIR/console.log"; then
            tail -n 25 "$VMDIR/console.log" | sed 's/^/  | /' >&2
            stop_vm; die "the VM failed to boot"
        fi
        if [ "$(since "$t0" | cut -d. -f1)" -ge "$BOOT_TIMEOUT" ]; then
            tail -n 25 "$VMDIR/console.log" | sed 's/^/  | /' >&2
            stop_vm; die "no ssh from the VM within ARM64_VM_BOOT_TIMEOUT=${BOOT_TIMEOUT}s"
        fi
        sleep 1
    done
    since "$t0" >"$VMDIR/boot-seconds"
    start_ssh_master
    log "VM up in $(cat "$VMDIR/boot-seconds") s"
}

stop_vm() {
    local pid _
    stop_ssh_master
    if pid=$(vm_pid); then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
        log "stopped the VM (pid $pid)"
    fi
    rm -f "$VMDIR/qemu.pid"
}

# With ARM64_VM_KEEP=0, stop a VM this command booted when it exits, unless
# another command uses it now (it holds .users); remove e2e's test binaries.
# shellcheck disable=SC2317 # called by the trap
on_exit() {
    if [ "$BOOTED_HERE" = 1 ] && [ "$KEEP" = 0 ]; then
        if [ "$USING" = 1 ] && flock -n -x 9; then
            stop_vm
        else
            log "the VM stays up: another command uses it (pid $(vm_pid || echo '?'))"
        fi
    fi
    [ -z "$E2E_OUT" ] || rm -f "$E2E_OUT"/*.test
    return 0
}
E2E_OUT=
trap on_exit EXIT
# A killed command (timeout, ^C) cleans up too.
trap 'exit 143' TERM
trap 'exit 130' INT

# Run the shell command $1 (already quoted for bash) in the VM, in the checkout.
# Timeout $2 seconds (0: none).  Returns its exit status; 125/124 on VM trouble.
vm_exec() {
    local cmd t=${2:-0} rc=0
    # Not "cd && CMD": bash would exec CMD, and a CMD killed by a signal would
    # come back as ssh's 255; this way it is 128+signal, as in a local shell.
    cmd="cd $(printf '%q' "$ROOT") || exit 125; $1; exit \$?"
    if [ "$t" != 0 ]; then
        # Inside the VM (so the command is really stopped), and outside (a hung VM).
        cmd="timeout -k 10 $t bash -c $(printf '%q' "$cmd")"
        timeout -k 10 $((t + 60)) ssh -F "$VMDIR/ssh_config" "$HOSTALIAS" "$cmd" || rc=$?
    else
        vm_ssh "$cmd" || rc=$?
    fi
    if [ "$rc" = 124 ] && [ "$t" != 0 ]; then
        say "error: timed out after ${t}s in the VM: $1"
        return 124
    fi
    if [ "$rc" = 255 ] || { [ "$rc" -ge 124 ] && [ "$t" != 0 ] && ! vm_pid >/dev/null; }; then
        if ! vm_pid >/dev/null; then
            say "error: the VM died (console: $VMDIR/console.log):"
            tail -n 15 "$VMDIR/console.log" | sed 's/^/  | /' >&2
            return 125
        fi
        if ! vm_ssh -o ConnectTimeout=10 true </dev/null >/dev/null 2>&1; then
            say "error: the VM does not answer ssh any more (qemu pid $(vm_pid)); '$0 stop' and try again"
            return 125
        fi
    fi
    return "$rc"
}

# ---------------------------------------------------------------- commands
cmd_build() { lock; build_image; unlock; log "image: $IMG"; }

cmd_boot() {
    local pid
    if pid=$(vm_pid); then log "the VM already runs (pid $pid, ssh port $(cat "$VMDIR/port"))"; return 0; fi
    KEEP=1
    ensure_vm
}

cmd_stop() { lock; stop_vm; unlock; }

cmd_status() {
    local pid
    echo "cache:   $CACHE"
    if [ -f "$IMG/complete" ]; then
        echo "image:   $IMG (built; $(du -sh "$IMG" | cut -f1) on disk)"
        sed 's/^/         /' "$IMG/info.txt" | head -n 6
    else
        echo "image:   $IMG (not built; '$0 build')"
    fi
    if pid=$(vm_pid); then
        echo "vm:      running, qemu pid $pid, ssh 127.0.0.1:$(cat "$VMDIR/port"), booted in $(cat "$VMDIR/boot-seconds" 2>/dev/null || echo '?') s"
        echo "         checkout $(cat "$VMDIR/checkout"), image $(cat "$VMDIR/image")"
        echo "         ssh: ssh -F $VMDIR/ssh_config $HOSTALIAS"
    else
        echo "vm:      not running"
    fi
    echo "shared:  $SHARED $([ -d "$SHARED" ] || echo '(missing: not mounted in the VM)')"
}

cmd_run() {
    [ $# -gt 0 ] || { usage >&2; exit 2; }
    ensure_vm
    local rc=0
    vm_exec "$(printf '%q ' "$@")" "$RUN_TIMEOUT" || rc=$?
    return "$rc"
}

cmd_e2e() {
    local pkg name bin rc out flags t0 passed=0 failed=0 p f secs
    # A directory of its own for each run (the VM sees it through the
    # checkout): runs for two cache directories, or two runs on one VM, must
    # not overwrite each other's test binaries while they run.  The binaries
    # are removed at exit, the logs stay; bin/arm64-e2e/latest is the last
    # run started; runs older than a week are removed.
    mkdir -p "$ROOT/bin/arm64-e2e"
    find "$ROOT/bin/arm64-e2e" -mindepth 1 -maxdepth 1 -type d -name 'run-*' -mtime +7 -exec rm -rf {} + 2>/dev/null || true
    out=$(mktemp -d "$ROOT/bin/arm64-e2e/run-$(date +%Y%m%d-%H%M%S)-XXXX")
    chmod 755 "$out"
    E2E_OUT=$out
    ln -sfn "$(basename "$out")" "$ROOT/bin/arm64-e2e/latest"
    flags=${ARM64_VM_E2E_FLAGS:--test.v -test.short -test.timeout=30m}
    command -v go >/dev/null || die "no go on the host (looked in PATH and /usr/local/go/bin)"
    log "GOARCH=arm64 go build ./cmd/gotpstub (GOTPSTUB_STUB of the e2e tests)"
    (cd "$ROOT" && GOARCH=arm64 go build -o "$out/gotpstub" ./cmd/gotpstub) ||
        die "GOARCH=arm64 go build ./cmd/gotpstub failed"
    for pkg in $E2E_PACKAGES; do
        name=$(echo "${pkg#./}" | sed 's#/$##; s#/#-#g')
        log "GOARCH=arm64 go test -c $pkg"
        (cd "$ROOT" && GOARCH=arm64 go test -c -o "$out/$name.test" "$pkg") ||
            die "GOARCH=arm64 go test -c $pkg failed"
    done
    ensure_vm
    for pkg in $E2E_PACKAGES; do
        name=$(echo "${pkg#./}" | sed 's#/$##; s#/#-#g')
        bin=$out/$name.test
        t0=$(now) rc=0
        # shellcheck disable=SC2086 # flags are words
        vm_exec "cd $(printf '%q' "${pkg%/}") && GOTPSTUB_STUB=$(printf '%q' "$out/gotpstub") $(printf '%q' "$bin") $flags" 0 </dev/null >"$out/$name.log" 2>&1 || rc=$?
        secs=$(since "$t0")
        p=$(grep -c '^--- PASS: ' "$out/$name.log" || true)
        f=$(grep -c '^--- FAIL: ' "$out/$name.log" || true)
        if [ "$rc" = 0 ]; then
            printf 'ok  \t%s\t%ss (arm64 VM; %s tests passed)\n' "$pkg" "$secs" "$p"
        else
            # Everything but the chatter of passing tests.
            grep -vE '^ *(=== (RUN|PAUSE|CONT|NAME)|--- (PASS|SKIP): )' "$out/$name.log" | tail -n 200
            # The failed tests' names last, where a truncated CI log still shows them.
            grep -E '^ *--- FAIL: |^panic: ' "$out/$name.log" | sed 's/^/failed: /' | tail -n 20 || true
            printf 'FAIL\t%s\t%ss (arm64 VM; exit status %s; log %s)\n' "$pkg" "$secs" "$rc" "$out/$name.log"
            [ "$f" -gt 0 ] || f=1      # died without a FAIL line: count it
        fi
        passed=$((passed + p)) failed=$((failed + f))
    done
    echo "e2e: $passed passed, $failed failed"
    [ "$failed" = 0 ]
}

cmd_suite() {
    [ $# -gt 0 ] || { usage >&2; exit 2; }
    local out=${ARM64_VM_SUITE_OUT:-/tmp/gotpstub-arm64-suite}
    local harness=${ARM64_VM_HARNESS:-$SHARED/gdbsuite/run-suite.sh}
    local built=1 gs_rc=0 gp_rc=0 gs_pass lost why
    [ -f "$harness" ] || die "no harness $harness (set ARM64_VM_SHARED or ARM64_VM_HARNESS)"
    case "$harness" in "$SHARED"/*|"$ROOT"/*) ;; *) die "the harness must be under $SHARED or $ROOT to be seen in the VM" ;; esac
    rm -rf "$out"
    mkdir -p "$out"

    local stub=${ARM64_VM_SUITE_STUB:-}
    if [ -n "$stub" ]; then
        log "the stub under test is $stub (ARM64_VM_SUITE_STUB; a path in the VM), not built here"
    else
        stub=bin/gotpstub-arm64
        log "GOARCH=arm64 go build -o bin/gotpstub-arm64 ./cmd/gotpstub"
        if ! (cd "$ROOT" && GOARCH=arm64 go build -o bin/gotpstub-arm64 ./cmd/gotpstub) >"$out/gotpstub-build.log" 2>&1; then
            built=0
            rm -f "$ROOT/bin/gotpstub-arm64"
        fi
    fi
    ensure_vm
    vm_exec "rm -rf $SUITE_GOUT/gdbserver $SUITE_GOUT/gotpstub" 0 </dev/null

    # The VM's gdbserver first: its gdb.sum is the baseline.
    echo "=== gdbserver (/usr/bin/gdbserver in the arm64 VM)"
    run_harness "$harness" gdbserver /usr/bin/gdbserver "" "$@" || gs_rc=$?
    fetch_results "$SUITE_GOUT/gdbserver" "$out/gdbserver"
    if [ ! -f "$out/gdbserver/gdb.sum" ]; then
        echo "gdbserver's run left no gdb.sum (status $gs_rc)"
        echo "lost ? PASS"
        return 1
    fi
    gs_pass=$(grep -c '^PASS: ' "$out/gdbserver/gdb.sum" || true)

    if [ "$built" = 1 ]; then
        echo "=== gotpstub ($stub in the arm64 VM)"
        run_harness "$harness" gotpstub "$stub" "$SUITE_GOUT/gdbserver/gdb.sum" "$@" || gp_rc=$?
        fetch_results "$SUITE_GOUT/gotpstub" "$out/gotpstub"
        if [ -f "$out/gotpstub/lost-passes.txt" ]; then
            lost=$(wc -l <"$out/gotpstub/lost-passes.txt")
        else
            echo "gotpstub's run left no results (status $gp_rc): every gdbserver PASS ($gs_pass) counts as lost"
            lost=$gs_pass
        fi
    else
        why=$(grep -v '^#' "$out/gotpstub-build.log" | head -n 3 | tr '\n' ' ')
        echo "gotpstub does not build for arm64: ${why:-see the log} (full log: $out/gotpstub-build.log)"
        echo "every gdbserver PASS ($gs_pass) counts as lost"
        lost=$gs_pass
    fi
    echo "results: $out/gdbserver/$([ -d "$out/gotpstub" ] && echo " $out/gotpstub/") (gdb.sum gdb.log summary.txt summary.tsv ...)"
    [ "$gs_rc" != 2 ] || echo "warning: the gdbserver run had a setup error (run-suite.sh status 2)"
    echo "lost $lost PASS"
    [ "$built" = 1 ] && [ "$lost" = 0 ] && [ "$gs_rc" != 2 ]
}

# run_harness HARNESS NAME STUB BASELINE TEST...: run-suite.sh in the VM, its
# output in $SUITE_GOUT/NAME.  The gdb source is the one in the image
# (GDBSUITE_CACHE); the testsuite's configure (run anew for every run-suite.sh
# run, ~45 s under TCG) keeps its autoconf cache in $SUITE_GOUT while the VM
# runs (CONFIG_SITE; ARM64_VM_SUITE_CONFIG_CACHE=0: not).
SUITE_GOUT=/tmp/arm64-suite                 # in the VM (a tmpfs)
run_harness() {
    local harness=$1 name=$2 stub=$3 baseline=$4 env
    shift 4
    local flags=${ARM64_VM_SUITE_FLAGS:---timeout 1200}
    env="GDBSUITE_CACHE=/var/cache/gdbsuite"
    if [ "${ARM64_VM_SUITE_CONFIG_CACHE:-1}" = 1 ]; then
        env="$env CONFIG_SITE=$SUITE_GOUT/config.site"
        vm_exec "mkdir -p $SUITE_GOUT && echo cache_file=$SUITE_GOUT/config.cache >$SUITE_GOUT/config.site" 0 </dev/null
    fi
    # shellcheck disable=SC2086 # flags are words
    vm_exec "$env bash $(printf '%q' "$harness") --stub $(printf '%q' "$stub") --out $SUITE_GOUT/$name \
        ${baseline:+--baseline $baseline} $flags $(printf '%q ' "$@")" 0 </dev/null
}

# Copy a run-suite.sh output directory's result files from the VM ($1) to the host ($2).
fetch_results() {
    mkdir -p "$2"
    vm_ssh "cd $(printf '%q' "$1") 2>/dev/null && tar -cf - --ignore-failed-read gdb.sum gdb.log summary.txt summary.tsv lost-passes.txt new-passes.txt baseline-passes.txt configure.log 2>/dev/null" </dev/null |
        tar -xf - -C "$2" 2>/dev/null || true
}

# ---------------------------------------------------------------- main
main() {
    [ $# -gt 0 ] || { usage >&2; exit 2; }
    local command=$1
    shift
    case "$command" in
        build) cmd_build ;;
        boot) cmd_boot ;;
        stop) cmd_stop ;;
        status) cmd_status ;;
        run) cmd_run "$@" ;;
        e2e) cmd_e2e ;;
        suite) cmd_suite "$@" ;;
        -h|--help|help) usage ;;
        *) usage >&2; exit 2 ;;
    esac
}
# On one line, so that bash has read the whole file before running any of it
# (editing this script while it runs cannot change a running build).
main "$@"; exit $?
