# tests/sim_hosts.sh — sourced by tests/multihost.sh (and bench/run.sh's
# hosts part): several hosts simulated on one machine, for MPICH's hydra.
#
# Method. Each host is a network, UTS and mount namespace made by
# unshare(1) and kept alive by one holder process (a sleep); it has its own
# name (hostname h1, h2, ...), its own loopback, one veth link named eth0
# with the address 10.45.0.K/24, and its own /etc/hosts, bind-mounted in
# its mount namespace, naming every host. The other ends of the links are
# joined by a bridge in a switch namespace of its own, so that the
# machine's own network is never touched. The filesystem stays shared,
# as over NFS, and so does /proc (one PID namespace: a process is found on
# its host by its UTS namespace).
#
# Hydra starts its proxy on another host through ssh; here its ssh
# launcher runs this file's sim_dir/ssh instead (HYDRA_LAUNCHER=ssh
# HYDRA_LAUNCHER_EXEC), which, as sshd would, runs the command in the
# host's namespaces, in a new session, with an empty environment, and not
# as a child of its own (a remote proxy and its ranks are no descendants
# of mpiexec, as on a cluster), then waits for it as ssh does. A host not
# up, or marked down (sim_dir/HOST.down), is refused as ssh refuses an
# unreachable one (status 255). UCX would move bytes between the
# namespaces through shared memory (one kernel); sim_tcp is the
# environment that forces its TCP transport over eth0.
#
#   sim_check              why hosts cannot be simulated here (nothing: they can)
#   sim_up N DIR           the switch and hosts h1..hN, their state in DIR
#                          (sim_dir); status 1 and a reason in sim_why if not
#   sim_in HOST CMD...     CMD run on HOST (its namespaces), in the current directory
#   sim_link HOST up|down  HOST's link up or cut (ip link set eth0 down on it)
#   sim_host_of PID        the host PID runs on, or nothing
#   sim_procs              the pids of every process on the hosts but the holders
#   sim_down               every process on the hosts (holders included) killed:
#                          the namespaces, links and bridge go with them
#   sim_hydra, sim_tcp     the environment for hydra's launcher; for UCX over TCP
#
# Needs root, util-linux's unshare, nsenter and setsid, and iproute2.

sim_dir=""
sim_hosts=""
# (the functions' own variables begin with sim_ too: sh has no locals)

sim_check() {
  [ "$(id -u)" = 0 ] || { echo "not root (network namespaces need root)"; return; }
  for sim_c in unshare nsenter setsid ip; do
    command -v $sim_c >/dev/null 2>&1 || { echo "no $sim_c on PATH"; return; }
  done
  unshare --net --uts --mount true 2>/dev/null || { echo "unshare --net --uts --mount fails (no network namespaces)"; return; }
}

# sim_hold NAME: a holder of new namespaces named NAME; its pid in sim_dir/NAME.pid
# (started from a subshell: no job of the caller's, whose end the shell would report)
sim_hold() {
  (unshare --net --uts --mount sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && ip link set lo up &&
    echo $$ >"$3.tmp" && mv "$3.tmp" "$3" && exec sleep 1000000' holder "$1" "$sim_dir/hosts" "$sim_dir/$1.pid" \
    </dev/null >/dev/null 2>"$sim_dir/$1.err" &)
}

# sim_ns NAME KIND: the namespace KIND (net, uts) of NAME's holder
sim_ns() { readlink "/proc/$(cat "$sim_dir/$1.pid")/ns/$2"; }

sim_up() {
  sim_dir=$2 sim_hosts="" sim_why=""
  mkdir -p "$sim_dir" || return 1
  printf '127.0.0.1\tlocalhost\n' >"$sim_dir/hosts"
  sim_k=1
  while [ $sim_k -le "$1" ]; do
    printf '10.45.0.%d\th%d\n' $sim_k $sim_k >>"$sim_dir/hosts"
    sim_hosts="$sim_hosts h$sim_k"
    sim_k=$((sim_k + 1))
  done
  for sim_h in sw $sim_hosts; do sim_hold $sim_h; done
  sim_i=0
  for sim_h in sw $sim_hosts; do
    while [ ! -s "$sim_dir/$sim_h.pid" ] && [ $sim_i -lt 200 ]; do sleep 0.05; sim_i=$((sim_i + 1)); done
    [ -s "$sim_dir/$sim_h.pid" ] || { sim_why="host $sim_h did not come up: $(cat "$sim_dir/$sim_h.err")"; return 1; }
    sim_ns $sim_h net >"$sim_dir/$sim_h.net"
    sim_ns $sim_h uts >"$sim_dir/$sim_h.uts"
  done
  sim_sw=$(cat "$sim_dir/sw.pid")
  nsenter -t "$sim_sw" --net sh -c 'ip link add br0 type bridge && ip link set br0 up' 2>"$sim_dir/sw.err" ||
    { sim_why="no bridge: $(cat "$sim_dir/sw.err")"; return 1; }
  sim_k=1
  for sim_h in $sim_hosts; do
    nsenter -t "$sim_sw" --net sh -c "ip link add v$sim_h type veth peer name eth0 netns $(cat "$sim_dir/$sim_h.pid") &&
      ip link set v$sim_h master br0 && ip link set v$sim_h up" 2>"$sim_dir/sw.err" &&
      nsenter -t "$(cat "$sim_dir/$sim_h.pid")" --net sh -c "ip addr add 10.45.0.$sim_k/24 dev eth0 && ip link set eth0 up" \
        2>>"$sim_dir/sw.err" ||
      { sim_why="no veth link for $sim_h: $(cat "$sim_dir/sw.err")"; return 1; }
    sim_k=$((sim_k + 1))
  done
  cat >"$sim_dir/ssh" <<EOF
#!/bin/sh
# ssh as hydra's launcher calls it, [OPTION...] HOST COMMAND...: COMMAND on
# HOST (tests/sim_hosts.sh), in a new session, no child of ours; waits for it.
dir='$sim_dir'
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
host=\$1
shift
[ -s "\$dir/\$host.pid" ] || { echo "ssh: Could not resolve hostname \$host: Name or service not known" >&2; exit 255; }
[ ! -e "\$dir/\$host.down" ] || { echo "ssh: connect to host \$host port 22: No route to host" >&2; exit 255; }
pf=\$(mktemp "\$dir/proxy.XXXXXX") || exit 255
nsenter -t "\$(cat "\$dir/\$host.pid")" --net --uts --mount --wd=/ env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/ \\
  setsid -f sh -c 'echo \$\$ >"\$0"; eval "exec \$1"' "\$pf" "\$*" </dev/null || exit 255
i=0
while [ ! -s "\$pf" ] && [ \$i -lt 200 ]; do sleep 0.05; i=\$((i + 1)); done
pid=\$(cat "\$pf")
rm -f "\$pf"
[ -n "\$pid" ] || exit 255
# until it ends: gone, or a zombie (no child of ours: the init that
# reaps it may take its time, and kill -0 still finds a zombie)
while { read -r st <"/proc/\$pid/stat"; } 2>/dev/null; do
  case "\${st##*) }" in Z*) break ;; esac
  sleep 0.02
done
EOF
  chmod +x "$sim_dir/ssh"
  sim_hydra="HYDRA_LAUNCHER=ssh HYDRA_LAUNCHER_EXEC=$sim_dir/ssh"
  sim_tcp="UCX_TLS=tcp,self UCX_NET_DEVICES=eth0"
}

sim_in() {
  sim_h=$1
  shift
  nsenter -t "$(cat "$sim_dir/$sim_h.pid")" --net --uts --mount --wd="$(pwd)" "$@"
}

sim_link() {
  nsenter -t "$(cat "$sim_dir/$1.pid")" --net ip link set eth0 "$2"
}

sim_host_of() {
  sim_u=$(readlink "/proc/$1/ns/uts" 2>/dev/null) || return 0
  for sim_h in $sim_hosts; do
    [ "$sim_u" = "$(cat "$sim_dir/$sim_h.uts")" ] && echo $sim_h
  done
  return 0
}

sim_procs() {
  [ -n "$sim_dir" ] || return 0
  set --
  sim_holders=""
  for sim_h in sw $sim_hosts; do
    [ -s "$sim_dir/$sim_h.net" ] && set -- "$@" -o -lname "$(sed 's/[][]/\\&/g' "$sim_dir/$sim_h.net")"
    [ -s "$sim_dir/$sim_h.pid" ] && sim_holders="$sim_holders $(cat "$sim_dir/$sim_h.pid")"
  done
  [ $# -gt 0 ] || return 0
  shift # the first -o
  # one find for every process (a readlink each would cost a fork each)
  find /proc/[0-9]*/ns/net -maxdepth 0 \( "$@" \) 2>/dev/null | while IFS=/ read -r _ _ sim_p _; do
    case " $sim_holders " in *" $sim_p "*) ;; *) echo "$sim_p" ;; esac
  done
}

sim_down() {
  [ -n "$sim_dir" ] || return 0
  for sim_p in $(sim_procs); do kill -KILL "$sim_p" 2>/dev/null; done
  for sim_h in sw $sim_hosts; do
    [ -s "$sim_dir/$sim_h.pid" ] && kill -KILL "$(cat "$sim_dir/$sim_h.pid")" 2>/dev/null
  done
  sim_i=0
  while [ -n "$(sim_procs)" ] && [ $sim_i -lt 100 ]; do sleep 0.05; sim_i=$((sim_i + 1)); done
  sim_dir=""
}
