#!/usr/bin/env bash
# A cluster of "hosts" on one machine, for testing edp across hosts for real (docs/launch.md,
# "Several hosts"). Each host edp-h1..edp-hN is a Linux network namespace with its own address on a
# private bridge (edp-br0, 10.77.0.0/24, through a veth pair), its own host name (a UTS namespace)
# and its own /tmp (a mount namespace binds a private directory there, as /tmp is local on a real
# node); every other path is the machine's, shared by all hosts as on a cluster with NFS — and so
# are the source tree and EDP_TC_SHARED's directories when they lie under /tmp (bound back in).
# A directory under /tmp that a command needs (its working directory, a build, a program) must be
# named in EDP_TC_SHARED (colon-separated) when `up` runs; `up` re-makes a running cluster that
# lacks one, and `exec` refuses a command whose working directory or absolute paths a host cannot
# see, naming this fix.
#
# Open MPI reaches the hosts without sshd: `exec` sets plm_rsh_agent to scripts/testcluster-rsh,
# which enters the target host's namespaces (nsenter) and runs orted there; its TCP traffic (oob
# and btl) is kept on the bridge. A host is held by one `sleep` process ("holder") living in its
# namespaces; `down` kills every process of every host, deletes namespaces, links and state.
#
#   scripts/testcluster.sh up [N]          N hosts (default 3); idempotent, repairs a half-made cluster
#   scripts/testcluster.sh down            removes everything (idempotent)
#   scripts/testcluster.sh status          exit 0 when up (prints the hosts), 1 otherwise
#   scripts/testcluster.sh check           exit 0 if namespaces can be made here, else 77 and the reason
#   scripts/testcluster.sh exec HOST [--] CMD...   runs CMD on HOST with the cluster's Open MPI settings
#   scripts/testcluster.sh hostfile [SLOTS] [N]    an Open MPI hostfile of the first N hosts
#   scripts/testcluster.sh link HOST up|down       cuts (or restores) a host's network link
#   scripts/testcluster.sh kill HOST               kills every process of HOST (the host stays up)
#   scripts/testcluster.sh pids HOST               the processes of HOST, its holder excepted
#   scripts/testcluster.sh slurm-up                a real Slurm on the hosts (below); idempotent;
#                                                  EDP_TC_GRES="edp-h1=a100:2 ..." gives hosts typed
#                                                  GPUs (GRES; /dev/null stand-ins as their devices)
#   scripts/testcluster.sh slurm-down              stops Slurm, its jobs and munged; removes their state
#   scripts/testcluster.sh slurm-check             exit 0 if namespaces and Slurm work here, else 77 and why
#
# Slurm: slurmctld on the first host, one `slurmd -N edp-hK` per host, from a slurm.conf generated in
# $STATE/slurm (NodeName=edp-hK NodeAddr=10.77.0.K, partition edp, proctrack/linuxproc, task/none,
# select/cons_tres, SchedulerParameters=permit_job_expansion; no cgroups, no accounting).
# Authentication: munge, with a key generated per
# cluster and one munged on the first host whose socket (on the shared file system) every host uses
# (AuthInfo=socket=...). Not auth/none: Slurm 22.05 (Debian 12) still ships it, but it trusts any
# user a client claims and newer releases are meant to drop it; real clusters run munge.
# `exec` sets SLURM_CONF while Slurm is up, so sbatch, srun, sinfo... find the cluster's controller.
#
# Needs root (network namespaces), iproute2 and util-linux (nsenter, unshare, flock). State lives in
# $EDP_TC_STATE (default /run/edp-testcluster). `up` and `down` take a lock on this script, so that
# concurrent callers wait for each other.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STATE=${EDP_TC_STATE:-/run/edp-testcluster}
NET=10.77.0       # the hosts are $NET.1 .. $NET.N; nothing else is ever given an address
BRIDGE=edp-br0
PREFIX=edp-h

die() { echo "testcluster: $*" >&2; exit 1; }
say() { echo "testcluster: $*" >&2; }

# Why namespaces cannot be made here, or nothing.
why_not() {
  [ "$(id -u)" = 0 ] || { echo "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"; return; }
  for t in ip nsenter unshare flock; do
    command -v "$t" >/dev/null || { echo "$t is not installed (scripts/setup.sh installs iproute2 and util-linux)"; return; }
  done
  local err
  if ! err=$(unshare --net --uts --mount true 2>&1); then echo "unshare --net --uts --mount failed: $err"; return; fi
  if ! err=$(ip link add edp-probe0 type bridge 2>&1); then echo "cannot create a bridge: $err"; return; fi
  ip link del edp-probe0 2>/dev/null || true
}

lock() { exec 9<"${BASH_SOURCE[0]}"; flock 9; }

# The directories under /tmp every host must see as the machine does: the source tree this script
# is in (CI may clone it under /tmp) and those in EDP_TC_SHARED (colon-separated), de-duplicated.
shared_under_tmp() {
  local p
  { realpath -m "$HERE/.."; tr ':' '\n' <<< "${EDP_TC_SHARED:-}" | while read -r p; do [ -n "$p" ] && realpath -m "$p"; done; } |
    grep -E '^/tmp/[^/]' | sort -u || true
}

hosts_present() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+$" | sort -V || true; }
holder_pid() { cat "$STATE/$1/holder.pid" 2>/dev/null || true; }
# The holder is alive and is still the process we started (its net namespace is the host's).
holder_ok() {
  local pid; pid=$(holder_pid "$1")
  [ -n "$pid" ] && [ -e "/proc/$pid" ] && [ -e "/run/netns/$1" ] &&
    [ "$(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null)" = "$(stat -L -c %i "/run/netns/$1")" ]
}

# Every process in HOST's network namespace (the holder included).
all_pids() { ip netns pids "$1" 2>/dev/null || true; }

kill_host_procs() {  # HOST [keep-holder]
  local h=$1 keep=${2:-} holder pids p
  holder=$(holder_pid "$h")
  for sig in TERM KILL; do
    pids=$(all_pids "$h" | { if [ -n "$keep" ] && [ -n "$holder" ]; then grep -vx "$holder"; else cat; fi; } || true)
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    kill -"$sig" $pids 2>/dev/null || true
    for _ in $(seq 20); do
      pids=$(all_pids "$h" | { if [ -n "$keep" ] && [ -n "$holder" ]; then grep -vx "$holder"; else cat; fi; } || true)
      [ -z "$pids" ] && return 0
      sleep 0.1
    done
  done
  for p in $pids; do say "warning: process $p of $h survived SIGKILL: $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)"; done
}

do_down() {
  local h n=0
  for h in $(hosts_present); do
    kill_host_procs "$h"
    ip netns del "$h" 2>/dev/null || true
    n=$((n + 1))
  done
  # veths die with their namespace; these are left only by a half-made `up`.
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^${PREFIX}[0-9]+-v$" || true); do
    ip link del "$l" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  if [ -d "$STATE" ]; then
    # Slurm (slurm-up) keeps its state here too; its daemons ran in the hosts, killed above.
    rm -rf "$STATE"
  fi
  say "down ($n host(s) removed)"
}

do_status() {
  local hs ok=0 h
  hs=$(hosts_present)
  [ -f "$STATE/hosts" ] || { echo "down"; [ -z "$hs" ] || echo "leftovers: $hs (run: $0 down)"; return 1; }
  for h in $(cat "$STATE/hosts"); do
    if holder_ok "$h"; then
      printf '%s %s holder=%s link=%s\n' "$h" "$(cat "$STATE/$h/addr")" "$(holder_pid "$h")" \
        "$(ip -n "$h" -br link show eth0 2>/dev/null | awk '{print $2}')"
    else
      echo "$h broken"; ok=1
    fi
  done
  return $ok
}

do_up() {
  local n=${1:-3} h i
  [[ "$n" =~ ^[1-9]$ ]] || die "up: 1..9 hosts, not '$n'"
  if [ -f "$STATE/hosts" ] && [ "$(wc -w < "$STATE/hosts")" = "$n" ] && do_status >/dev/null 2>&1; then
    local missing
    missing=$(shared_under_tmp | grep -vxF -f <(cat "$STATE/shared" 2>/dev/null) || true)
    if [ -z "$missing" ]; then
      say "already up: $(tr '\n' ' ' < "$STATE/hosts")"
      return 0
    fi
    say "re-making the cluster: its hosts do not see $(echo $missing) (EDP_TC_SHARED)"
  fi
  if [ -n "$(hosts_present)" ] || [ -d "$STATE" ] || ip link show "$BRIDGE" >/dev/null 2>&1; then
    say "removing a previous or half-made cluster first"
    do_down
  fi
  local reason; reason=$(why_not)
  [ -z "$reason" ] || die "cannot build the cluster: $reason"
  trap 'say "up failed; cleaning up"; do_down; exit 1' ERR INT TERM
  mkdir -p "$STATE"
  ip link add "$BRIDGE" type bridge
  ip link set "$BRIDGE" up
  : > "$STATE/hosts.tmp"
  for i in $(seq 1 "$n"); do
    h=$PREFIX$i
    mkdir -p "$STATE/$h/tmp"
    chmod 1777 "$STATE/$h/tmp"
    echo "$NET.$i" > "$STATE/$h/addr"
    ip netns add "$h"
    ip link add "$h-v" type veth peer name eth0 netns "$h"
    ip link set "$h-v" master "$BRIDGE" up
    ip -n "$h" addr add "$NET.$i/24" dev eth0
    ip -n "$h" link set lo up
    ip -n "$h" link set eth0 up
    # Shared paths under /tmp (the source tree when it was cloned there, EDP_TC_SHARED) are bound
    # into the host's private /tmp at the same place, so that a checkout in /tmp works on every host.
    local binds="" d
    for d in $(shared_under_tmp); do
      mkdir -p "$STATE/$h/tmp/${d#/tmp/}"
      binds="$binds mount --rbind '$d' '$STATE/$h/tmp/${d#/tmp/}' &&"
    done
    # The holder: in the host's network namespace, with its own UTS (host name) and mount (/tmp)
    # namespaces; everything run on the host enters all three through its pid.
    setsid ip netns exec "$h" unshare --mount --uts --propagation private sh -c \
      "hostname $h && $binds mount --rbind '$STATE/$h/tmp' /tmp && echo \$\$ > '$STATE/$h/holder.pid.tmp' && \
       mv '$STATE/$h/holder.pid.tmp' '$STATE/$h/holder.pid' && exec sleep infinity" </dev/null >/dev/null 2>&1 9<&- &
    for _ in $(seq 600); do  # up to 60 s: a loaded machine starts it late
      [ -f "$STATE/$h/holder.pid" ] && break; sleep 0.1; done
    holder_ok "$h" || { say "the holder of $h did not start"; false; }
    echo "$h" >> "$STATE/hosts.tmp"
  done
  shared_under_tmp > "$STATE/shared"
  mv "$STATE/hosts.tmp" "$STATE/hosts"
  trap - ERR INT TERM
  say "up: $(tr '\n' ' ' < "$STATE/hosts")(bridge $BRIDGE, $NET.0/24)"
}

# ---- Slurm on the cluster (slurm-up / slurm-down) ---------------------------------------------
# A real Slurm, started as an administrator starts it: slurmctld on the first host, one slurmd per
# host (`slurmd -N edp-hK` in that host's namespaces), from a slurm.conf generated in
# $STATE/slurm. Authentication is munge (AuthType=auth/munge): Debian 12's Slurm 22.05 still ships
# auth/none, but it trusts any user a client claims and newer releases are meant to drop it, so the
# cluster uses what real clusters use. One munged
# (a key generated per cluster, never /etc/munge's) runs on the first host; its socket lives on the
# shared file system, so that every host reaches it as nodes reach their own munged, all with the
# same key (AuthInfo=socket=...). No cgroups: ProctrackType=proctrack/linuxproc, TaskPlugin=task/none.
SLURM_TOOLS="munged mungekey slurmctld slurmd sbatch salloc srun sinfo squeue scontrol scancel"
slurm_why_not() {
  local t
  for t in $SLURM_TOOLS; do
    command -v "$t" >/dev/null || { echo "$t is not installed (scripts/setup.sh installs slurmctld slurmd slurm-client munge)"; return; }
  done
}
slurm_up_now() { [ -f "$STATE/slurm/up" ]; }

# A host's GPUs as slurm.conf's "Gres=gpu:TYPE:COUNT " (with the space), from EDP_TC_GRES
# ("edp-h1=a100:2 edp-h3=v100:2": typed GPUs on those hosts, none on the others), or nothing.
node_gres() {
  local e
  for e in ${EDP_TC_GRES:-}; do
    [ "${e%%=*}" = "$1" ] && { echo "Gres=gpu:${e#*=} "; return; }
  done
  return 0
}

slurm_conf() {  # the hosts; writes $STATE/slurm/slurm.conf
  local d=$STATE/slurm topo h i=0
  # The CPU layout slurmd itself detects (every host is this machine), without its name and memory.
  topo=$(slurmd -C | head -1 | tr ' ' '\n' | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=' | tr '\n' ' ')
  {
    echo "# Generated by scripts/testcluster.sh slurm-up; removed by slurm-down and down."
    echo "ClusterName=edptest"
    echo "SlurmctldHost=${PREFIX}1($NET.1)"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$d/munge/munge.socket"
    echo "StateSaveLocation=$d/ctld"
    echo "SlurmctldPidFile=$d/slurmctld.pid"
    echo "SlurmctldLogFile=$d/slurmctld.log"
    echo "SlurmdSpoolDir=$d/%n/spool"
    echo "SlurmdPidFile=$d/%n/slurmd.pid"
    echo "SlurmdLogFile=$d/%n/slurmd.log"
    echo "PlugStackConfig=$d/plugstack.conf"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    echo "SwitchType=switch/none"
    echo "MpiDefault=none"
    echo "SchedulerType=sched/backfill"
    # Running jobs may grow by job expansion (salloc --dependency=expand:<job>, then scontrol update
    # NumNodes=0): edp-autoscale serve --backend slurm uses it (docs/autoscaler.md §8).
    echo "SchedulerParameters=permit_job_expansion"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "ReturnToService=2"
    echo "SlurmdTimeout=30"
    echo "InactiveLimit=0"
    echo "KillWait=5"
    echo "MinJobAge=60"
    [ -z "${EDP_TC_GRES:-}" ] || echo "GresTypes=gpu"
    for h in "$@"; do
      i=$((i + 1))
      echo "NodeName=$h NodeAddr=$NET.$i ${topo}$(node_gres "$h")State=UNKNOWN"
    done
    echo "PartitionName=edp Nodes=$(echo "$@" | tr ' ' ',') Default=YES MaxTime=INFINITE State=UP"
  } > "$d/slurm.conf.tmp"
  mv "$d/slurm.conf.tmp" "$d/slurm.conf"
  # The nodes' GPUs (EDP_TC_GRES). slurmd counts a GPU only by its device file, so each is a
  # character device with /dev/null's numbers in the node's state directory: Slurm schedules them,
  # a job that opened one would read nothing.
  {
    echo "# Generated by scripts/testcluster.sh slurm-up from EDP_TC_GRES."
    echo "AutoDetect=off"
    for h in "$@"; do
      local g n k
      g=$(node_gres "$h")
      [ -n "$g" ] || continue
      g=${g#Gres=gpu:}; g=${g% }; n=${g#*:}
      for ((k = 0; k < n; k++)); do rm -f "$d/$h/gpu$k"; mknod "$d/$h/gpu$k" c 1 3; done
      echo "NodeName=$h Name=gpu Type=${g%%:*} File=$d/$h/gpu[0-$((n - 1))]"
    done
  } > "$d/gres.conf"
  printf '%s\n' "${EDP_TC_GRES:-}" > "$d/gres.spec"
  : > "$d/plugstack.conf"  # not /etc/slurm's: no SPANK plugin of this machine
  # slurmd 22.05 initializes a cgroup plugin even when no plugin uses cgroups, and its autodetection
  # fails in a host: `ip netns exec` mounts a fresh sysfs, so /sys/fs/cgroup is an empty directory
  # there. Named explicitly, cgroup/v1 loads without touching any hierarchy (nothing asks it to).
  echo "CgroupPlugin=cgroup/v1" > "$d/cgroup.conf"
}

# Stops every Slurm daemon and job of the cluster and removes Slurm's state. The hosts run nothing
# else that outlives a test, so every process of every host but its holder is ended (slurmstepd
# and job steps included); then munged, which runs on the first host as well.
slurm_down() {
  local h
  [ -f "$STATE/hosts" ] || { rm -rf "$STATE/slurm"; return 0; }
  for h in $(cat "$STATE/hosts"); do holder_ok "$h" && kill_host_procs "$h" keep; done
  rm -rf "$STATE/slurm"
}

do_slurm_up() {
  local reason h hosts first d=$STATE/slurm
  reason=$(slurm_why_not)
  [ -z "$reason" ] || { echo "testcluster: $reason" >&2; exit 77; }
  do_status >/dev/null 2>&1 || die "the cluster is not up (run: $0 up)"
  hosts=$(cat "$STATE/hosts")
  first=$(head -1 "$STATE/hosts")
  local e
  for e in ${EDP_TC_GRES:-}; do
    [[ $e =~ ^[a-z0-9-]+=[a-z0-9_]+:[1-9][0-9]*$ ]] || die "EDP_TC_GRES: '$e' is not HOST=TYPE:COUNT"
    grep -qx "${e%%=*}" "$STATE/hosts" || die "EDP_TC_GRES: '${e%%=*}' is not a host of the cluster ($(echo $hosts))"
  done
  # Up: every node answers (idle, or running jobs, which a second slurm-up leaves alone), from a
  # slurm.conf this version of the script wrote (a Slurm started before it lacks job expansion).
  if slurm_up_now && grep -qx 'SchedulerParameters=permit_job_expansion' "$d/slurm.conf" 2>/dev/null &&
     [ "$(cat "$d/gres.spec" 2>/dev/null)" = "${EDP_TC_GRES:-}" ] &&
     [ "$(SLURM_CONF=$d/slurm.conf run_on "$first" sinfo -h -N -o '%t' 2>/dev/null |
                          grep -cxE 'idle|alloc|mix|comp')" = "$(wc -w <<<"$hosts")" ]; then
    say "slurm already up"
    return 0
  fi
  slurm_down
  trap 'say "slurm-up failed; stopping Slurm"; for f in "$d"/slurmctld.log "$d"/*/slurmd.log "$d"/munge/munged.log; do [ -f "$f" ] && { echo "--- $f"; tail -15 "$f"; } >&2; done; slurm_down; exit 1' ERR INT TERM
  mkdir -p "$d/ctld" "$d/munge"
  chmod 700 "$d/munge"
  for h in $hosts; do mkdir -p "$d/$h/spool"; done
  # shellcheck disable=SC2086
  slurm_conf $hosts
  mungekey --create --keyfile="$d/munge/munge.key" --bits=1024
  chmod 400 "$d/munge/munge.key"
  # --force: munged refuses to run as root without it (the cluster runs as root, like its tests).
  run_on "$first" munged --force --socket="$d/munge/munge.socket" --key-file="$d/munge/munge.key" \
    --pid-file="$d/munge/munged.pid" --log-file="$d/munge/munged.log" --seed-file="$d/munge/munged.seed" </dev/null >>"$d/daemons.out" 2>&1 9<&-
  for h in $hosts; do
    run_on "$h" munge -S "$d/munge/munge.socket" -n | run_on "$h" unmunge -S "$d/munge/munge.socket" >/dev/null ||
      { say "munge credentials do not work on $h"; false; }
  done
  SLURM_CONF=$d/slurm.conf run_on "$first" slurmctld -f "$d/slurm.conf" </dev/null >>"$d/daemons.out" 2>&1 9<&-
  for h in $hosts; do SLURM_CONF=$d/slurm.conf run_on "$h" slurmd -f "$d/slurm.conf" -N "$h" </dev/null >>"$d/daemons.out" 2>&1 9<&-; done
  local n; n=$(wc -w <<<"$hosts")
  for _ in $(seq 150); do
    SLURM_CONF=$d/slurm.conf run_on "$first" sinfo -h -o '%D %t' 2>/dev/null | grep -qx "$n idle" && break
    sleep 0.2
  done
  SLURM_CONF=$d/slurm.conf run_on "$first" sinfo -h -o '%D %t' | grep -qx "$n idle" ||
    { say "the nodes did not come up idle: $(SLURM_CONF=$d/slurm.conf run_on "$first" sinfo -h -N -o '%N %t' | tr '\n' ' ')"; false; }
  touch "$d/up"
  trap - ERR INT TERM
  say "slurm up: slurmctld on $first, slurmd on $(echo $hosts) (SLURM_CONF=$d/slurm.conf)"
}

# Cuts or restores a host's link (its veth's bridge end). `up` returns once the host answers TCP
# from another host (a refused connection to port 9 is an answer), at most 10 s: a test that starts
# a job right after restoring a link must not race the carrier coming back.
do_link() {
  local h=$1 state=$2 from addr reply
  [ "$state" = up ] || [ "$state" = down ] || die "link: up or down, not '$state'"
  holder_ok "$h" || die "host $h is not up"
  ip link set "$h-v" "$state"
  if [ "$state" = up ]; then
    addr=$(cat "$STATE/$h/addr")
    from=$(grep -vx "$h" "$STATE/hosts" | head -1 || true)
    [ -n "$from" ] || from=$h
    local ok=0
    for _ in $(seq 50); do
      reply=$(nsenter -t "$(holder_pid "$from")" -n -- timeout 1 bash -c "exec 3<>/dev/tcp/$addr/9" 2>&1 || true)
      if [[ "$reply" == *refused* ]]; then ok=1; break; fi
      sleep 0.2
    done
    [ $ok = 1 ] || die "link of $h is up but $from cannot reach $addr within 10 s"
  fi
  say "link of $h $state"
}

# Runs a command inside HOST's namespaces, in the caller's working directory. That directory and
# every absolute path of the command that exists here must exist there too (each host has its own
# /tmp): otherwise stop before running anything, with the fix.
run_on() {
  local h=$1; shift
  holder_ok "$h" || die "host $h is not up (run: $0 up)"
  local paths=("$PWD") a unseen
  for a in "$@"; do [[ "$a" == /* ]] && [ -e "$a" ] && paths+=("$a"); done
  unseen=$(nsenter -t "$(holder_pid "$h")" -m -- sh -c 'for p; do [ -e "$p" ] || echo "$p"; done' sh "${paths[@]}")
  if [ -n "$unseen" ]; then
    die "host $h cannot see $(echo $unseen): /tmp is each host's own. Name the directories under /tmp that the hosts need (working directory, build, data) in EDP_TC_SHARED, colon-separated, and run '$0 up' again (it re-makes the cluster with them), or work outside /tmp"
  fi
  nsenter -t "$(holder_pid "$h")" -n -u -m --wd="$PWD" -- "$@"
}

do_exec() {
  local h=$1; shift
  [ "${1:-}" = "--" ] && shift
  [ $# -gt 0 ] || die "exec: no command"
  # Open MPI: reach the other hosts through the namespace agent, keep TCP on the bridge, launch
  # every orted from here (no tree spawn: simpler to follow, a few hosts only).
  export OMPI_MCA_plm_rsh_agent="$HERE/testcluster-rsh"
  export OMPI_MCA_plm_rsh_no_tree_spawn=1
  export OMPI_MCA_btl_tcp_if_include="$NET.0/24"
  export OMPI_MCA_oob_tcp_if_include="$NET.0/24"
  export EDP_TC_STATE="$STATE"
  # Slurm's commands find the cluster's slurm.conf (slurm-up).
  if slurm_up_now; then export SLURM_CONF="$STATE/slurm/slurm.conf"; fi
  run_on "$h" "$@"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  up) lock; do_up "$@" ;;
  down) lock; do_down ;;
  slurm-up) lock; do_slurm_up ;;
  slurm-down) lock; slurm_down; say "slurm down" ;;
  slurm-check) r=$(why_not); [ -n "$r" ] || r=$(slurm_why_not); if [ -n "$r" ]; then echo "testcluster: $r"; exit 77; fi; echo "testcluster: namespaces and Slurm work here" ;;
  status) do_status ;;
  check) r=$(why_not); if [ -n "$r" ]; then echo "testcluster: $r"; exit 77; fi; echo "testcluster: namespaces work here" ;;
  exec) [ $# -ge 1 ] || die "usage: exec HOST [--] CMD..."; do_exec "$@" ;;
  run-on) run_on "$@" ;;  # no Open MPI settings (testcluster-rsh)
  hostfile)
    slots=${1:-1}; n=${2:-0}; i=0
    [ -f "$STATE/hosts" ] || die "the cluster is not up"
    for h in $(cat "$STATE/hosts"); do
      i=$((i + 1)); [ "$n" -gt 0 ] && [ "$i" -gt "$n" ] && break
      echo "$h slots=$slots"
    done ;;
  link) [ $# -eq 2 ] || die "usage: link HOST up|down"; do_link "$1" "$2" ;;
  kill) [ $# -eq 1 ] || die "usage: kill HOST"; holder_ok "$1" || die "host $1 is not up"; kill_host_procs "$1" keep ;;
  pids) [ $# -eq 1 ] || die "usage: pids HOST"; all_pids "$1" | grep -vx "$(holder_pid "$1")" || true ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
